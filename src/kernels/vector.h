#pragma once
// Building blocks of the hand-written CPU kernels (dropout, fused cross-entropy): 16-lane
// GCC/Clang vector types, so the arithmetic is SIMD by construction (auto-vectorisation
// without -ffast-math left the reductions and the bf16 conversions scalar), compiled per
// instruction set by TORCHMT_VECTOR_KERNEL.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu_isa.h"

// GCC notes that passing 64-byte vectors by value would change the calling convention
// between clones; every helper taking or returning one is forced inline, so none is passed.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

// Kernels written with these vectors get three variants of one forced-inline body: AVX-512,
// AVX2 + FMA (x86-64-v3) and portable, chosen per call by cpu_isa() (TORCHMT_VECTOR_KERNEL), so
// one binary runs everywhere, uses the widest vectors the CPU has, and a test can run each copy
// (the build itself stays baseline x86-64). AVX2 with FMA, not AVX2 alone: without FMA every
// product and sum is two instructions and rounds twice (AMD Zen 3 took that path once).
// Not under clang: clang 14 (Debian 12's, which builds the fuzzers) rejects the 64-byte vectors
// the forced-inline helpers take inside an AVX-512 copy, so clang builds get portable code in
// every copy.
#if TORCHMT_X86 && !defined(__clang__)
#define TORCHMT_VECTOR_TARGET_AVX512 TORCHMT_TARGET_AVX512
#define TORCHMT_VECTOR_TARGET_AVX2 TORCHMT_TARGET_AVX2
#else
#define TORCHMT_VECTOR_TARGET_AVX512
#define TORCHMT_VECTOR_TARGET_AVX2
#endif

// Defines `name` (params): the variants name##_variant<kAvx512 | kAvx2 | kPortable> of one
// forced-inline `body args`, each compiled for its level, and `name` calling the one for
// cpu_isa() through isa_dispatch (cpu_isa.h).
#define TORCHMT_VECTOR_KERNEL(ret, name, body, params, args)                                              \
  template <::torchmt::kernels::CpuIsa>                                                                   \
  ret name##_variant params;                                                                              \
  template <>                                                                                             \
  TORCHMT_VECTOR_TARGET_AVX512 ret name##_variant<::torchmt::kernels::CpuIsa::kAvx512> params {          \
    return body args;                                                                                     \
  }                                                                                                       \
  template <>                                                                                             \
  TORCHMT_VECTOR_TARGET_AVX2 ret name##_variant<::torchmt::kernels::CpuIsa::kAvx2> params {              \
    return body args;                                                                                     \
  }                                                                                                       \
  template <>                                                                                             \
  ret name##_variant<::torchmt::kernels::CpuIsa::kPortable> params {                                      \
    return body args;                                                                                     \
  }                                                                                                       \
  ret name params {                                                                                       \
    return ::torchmt::kernels::isa_dispatch<::torchmt::kernels::CpuIsa::kAvx512,                          \
                                            ::torchmt::kernels::CpuIsa::kAvx2>(                           \
        ::torchmt::kernels::cpu_isa(),                                                                    \
        [&](auto level_) -> ret { return name##_variant<decltype(level_)::value> args; });                \
  }

// Helpers are forced inline: a call to an out-of-line copy would run baseline code with
// 64-byte vectors split into SSE pieces, whatever clone it was called from.
#if defined(__GNUC__)
#define TORCHMT_VECTOR_INLINE __attribute__((always_inline)) inline
#else
#define TORCHMT_VECTOR_INLINE inline
#endif

namespace torchmt::kernels {

constexpr int kLanes = 16;  // one 512-bit register; two AVX2 or four SSE registers otherwise

using f32x16 = float __attribute__((vector_size(64)));
using i32x16 = int32_t __attribute__((vector_size(64)));
using u32x16 = uint32_t __attribute__((vector_size(64)));
using u16x16 = uint16_t __attribute__((vector_size(32)));

TORCHMT_VECTOR_INLINE f32x16 load16(const float* p) {
  f32x16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
TORCHMT_VECTOR_INLINE void store16(float* p, f32x16 v) { std::memcpy(p, &v, sizeof v); }
TORCHMT_VECTOR_INLINE f32x16 splat(float x) { return f32x16{} + x; }

// bf16 <-> fp32 for 16 values; rounding to nearest even by the carry trick (a NaN from a
// bf16 input or from arithmetic has zero low bits, so it stays a NaN).
TORCHMT_VECTOR_INLINE f32x16 load16_bf16(const uint16_t* p) {
  u16x16 h;
  std::memcpy(&h, p, sizeof h);
  return reinterpret_cast<f32x16>(__builtin_convertvector(h, u32x16) << 16);
}
TORCHMT_VECTOR_INLINE void store16_bf16(uint16_t* p, f32x16 v) {
  u32x16 bits = reinterpret_cast<u32x16>(v);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  const u16x16 h = __builtin_convertvector(bits >> 16, u16x16);
  std::memcpy(p, &h, sizeof h);
}

TORCHMT_VECTOR_INLINE float sum16(f32x16 v) {
  float s = 0.0f;
  for (int l = 0; l < kLanes; ++l) s += v[l];
  return s;
}

// 8-lane halves of a 16-lane vector, for kernels whose 16-lane tiles do not fit AVX2's 16
// registers (GCC moves 64-byte vectors through the stack there): lanes 0-7 and 8-15.
using f32x8 = float __attribute__((vector_size(32)));
using u32x8 = uint32_t __attribute__((vector_size(32)));
using u16x8 = uint16_t __attribute__((vector_size(16)));
using i32x8 = int32_t __attribute__((vector_size(32)));

template <typename V>
struct IntLanes;  // the int32 vector of a float vector's width
template <>
struct IntLanes<f32x16> {
  using type = i32x16;
};
template <>
struct IntLanes<f32x8> {
  using type = i32x8;
};

// Lane-wise mask ? a : b and a > b ? a : b, for float vectors of any width, without relying on
// vector ?: support.
template <typename V>
TORCHMT_VECTOR_INLINE V select(typename IntLanes<V>::type mask, V a, V b) {
  using I = typename IntLanes<V>::type;
  return reinterpret_cast<V>((mask & reinterpret_cast<I>(a)) | (~mask & reinterpret_cast<I>(b)));
}
template <typename V>
TORCHMT_VECTOR_INLINE V max_lanes(V a, V b) {
  return select<V>(a > b, a, b);
}

// exp(x) for x <= 0, lane by lane (V: a float vector of any width), relative error ~2e-7: 2^k
// through the exponent bits and 2^f, |f| <= 1/2, by its degree-6 Taylor polynomial. Inputs below
// -87 give exp(-87).
template <typename V>
TORCHMT_VECTOR_INLINE V exp_nonpositive(V x) {
  using I = typename IntLanes<V>::type;
  x = max_lanes(x, V{} - 87.0f);
  const V t = x * 1.44269504088896341f;
  const V k = (t + 12582912.0f) - 12582912.0f;  // round to nearest (1.5 * 2^23 trick)
  const V f = t - k;
  V p = V{} + 1.5403530393381609e-4f;
  p = p * f + 1.3333558146428443e-3f;
  p = p * f + 9.6181291076284772e-3f;
  p = p * f + 5.5504108664821580e-2f;
  p = p * f + 2.4022650695910071e-1f;
  p = p * f + 6.9314718055994531e-1f;
  p = p * f + 1.0f;
  const I exponent = (__builtin_convertvector(k, I) + 127) << 23;
  return p * reinterpret_cast<V>(exponent);
}

TORCHMT_VECTOR_INLINE f32x8 load8_as_float(const float* p) {
  f32x8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
TORCHMT_VECTOR_INLINE f32x8 load8_as_float(const uint16_t* p) {  // bf16 bits
  u16x8 h;
  std::memcpy(&h, p, sizeof h);
  return reinterpret_cast<f32x8>(__builtin_convertvector(h, u32x8) << 16);
}

// Sum of the 16 lanes as a tree of half-width adds (the lane-by-lane loop of sum16 costs as
// much as a 256-long dot product in the linear kernel), from its halves: lanes 0-7 and 8-15.
TORCHMT_VECTOR_INLINE float tree_sum16(f32x8 lo8, f32x8 hi8) {
  using f32x4 = float __attribute__((vector_size(16)));
  const f32x8 s8 = lo8 + hi8;
  f32x4 lo4, hi4;
  std::memcpy(&lo4, &s8, sizeof lo4);
  std::memcpy(&hi4, reinterpret_cast<const char*>(&s8) + sizeof lo4, sizeof hi4);
  const f32x4 s4 = lo4 + hi4;
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

TORCHMT_VECTOR_INLINE float tree_sum16(f32x16 v) {
  f32x8 lo8, hi8;
  std::memcpy(&lo8, &v, sizeof lo8);
  std::memcpy(&hi8, reinterpret_cast<const char*>(&v) + sizeof lo8, sizeof hi8);
  return tree_sum16(lo8, hi8);
}

// The largest of the 16 lanes as a tree (NaN lanes are passed over), from its 8-lane halves.
TORCHMT_VECTOR_INLINE float tree_max16(f32x16 v) {
  using f32x4 = float __attribute__((vector_size(16)));
  f32x8 lo8, hi8;
  std::memcpy(&lo8, &v, sizeof lo8);
  std::memcpy(&hi8, reinterpret_cast<const char*>(&v) + sizeof lo8, sizeof hi8);
  const f32x8 m8 = max_lanes(lo8, hi8);
  f32x4 lo4, hi4;
  std::memcpy(&lo4, &m8, sizeof lo4);
  std::memcpy(&hi4, reinterpret_cast<const char*>(&m8) + sizeof lo4, sizeof hi4);
  const f32x4 m4 = lo4 > hi4 ? lo4 : hi4;
  const float a = m4[0] > m4[2] ? m4[0] : m4[2], b = m4[1] > m4[3] ? m4[1] : m4[3];
  return a > b ? a : b;
}

// LayerNorm's moments of a row given as its dim offsets from a pivot (the row's first value:
// exact for values near each other) summing to `total`: the offsets' mean and 1 / sqrt(variance +
// eps), in two passes (mean, then squared deviations), so a row whose mean is large against its
// spread keeps its low bits.
TORCHMT_VECTOR_INLINE void offset_moments(const float* offsets, int64_t dim, float total, float eps, float* mean,
                                          float* rstd) {
  const int64_t vec_end = dim - dim % kLanes;
  const float inv_dim = 1.0f / static_cast<float>(dim);
  const float m = total * inv_dim;
  f32x16 sq = splat(0.0f);
  for (int64_t j = 0; j < vec_end; j += kLanes) {
    const f32x16 d = load16(offsets + j) - m;
    sq += d * d;
  }
  float squares = tree_sum16(sq);
  for (int64_t j = vec_end; j < dim; ++j) squares += (offsets[j] - m) * (offsets[j] - m);
  *mean = m;
  *rstd = 1.0f / std::sqrt(squares * inv_dim + eps);
}

TORCHMT_VECTOR_INLINE float max_of16(f32x16 v) {
  float m = v[0];
  for (int l = 1; l < kLanes; ++l) m = v[l] > m ? v[l] : m;
  return m;
}

TORCHMT_VECTOR_INLINE float float_from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

TORCHMT_VECTOR_INLINE uint32_t bits_from_float(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

TORCHMT_VECTOR_INLINE float bf16_to_float(uint16_t bits) { return float_from_bits(static_cast<uint32_t>(bits) << 16); }

// Round to nearest even by the carry trick. c10::BFloat16's constructor branches on NaN
// and keeps loops scalar; here a NaN stays a NaN as long as its low 16 bits are zero,
// which holds for every NaN these kernels can produce (they come from bf16 inputs or from
// arithmetic, whose default NaN is 0x7FC00000).
TORCHMT_VECTOR_INLINE uint16_t float_to_bf16(float value) {
  uint32_t bits = bits_from_float(value);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// Element access for kernels templated on fp32 or bf16 (bf16 held as its uint16_t bits):
// values are read widened to fp32 and written back rounded to the element type.
TORCHMT_VECTOR_INLINE f32x16 load16_as_float(const float* p) { return load16(p); }
TORCHMT_VECTOR_INLINE f32x16 load16_as_float(const uint16_t* p) { return load16_bf16(p); }
TORCHMT_VECTOR_INLINE void store16_from_float(float* p, f32x16 v) { store16(p, v); }
TORCHMT_VECTOR_INLINE void store16_from_float(uint16_t* p, f32x16 v) { store16_bf16(p, v); }
TORCHMT_VECTOR_INLINE float load_as_float(const float* p) { return *p; }
TORCHMT_VECTOR_INLINE float load_as_float(const uint16_t* p) { return bf16_to_float(*p); }
TORCHMT_VECTOR_INLINE void store_from_float(float* p, float v) { *p = v; }
TORCHMT_VECTOR_INLINE void store_from_float(uint16_t* p, float v) { *p = float_to_bf16(v); }

}  // namespace torchmt::kernels
