#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include "primitives.h"
#include "parallel.h"
#include "torchmt/util/device.h"
#include "vector.h"

#if TORCHMT_X86
#include <immintrin.h>
// AVX512-BF16's dot product (two bf16 products per fp32 lane and instruction) at cpu_isa()
// avx512-bf16: half the instructions of converting to fp32 and no conversion work.
#define TORCHMT_BF16_DOT_INLINE __attribute__((always_inline)) TORCHMT_TARGET_AVX512_BF16 inline
#endif

namespace torchmt::kernels {
namespace {

constexpr int kRowTile = 4;     // rows of x per block: 4 x kWeightTile accumulators stay in registers
constexpr int kWeightTile = 4;  // weight rows (output features) per block
// Weights are prefetched into L2 (prefetcht1) this far ahead of the FMAs. A decoding step of one
// sentence streams every decoder weight from memory (~19 MB fp32 for the small model: more
// than this CPU's L3 keeps between steps) and the hardware prefetcher alone lost the
// 1-4 KB runs of the 4-row blocks. prefetcht1 beat prefetcht0, and distances from 8 to 128 KB
// did about equally well (tools/bench/DECISIONS.md).
constexpr int64_t kPrefetchBytes = 16384;

// How the weights are prefetched. kPerLine: each cache line kPrefetchBytes ahead of its FMAs,
// as they are reached. kBlockAhead: all lines of the weight block two blocks ahead, at once,
// before a block's FMAs (and the first two blocks when a range starts), so that the memory
// system has a block's worth of misses in flight instead of one line per FMA group; for one
// row of x, where nothing but the weight stream is left to overlap (the AVX2 variant of linear_columns_at).
enum class Prefetch { kPerLine, kBlockAhead };

// The last `rest` (< 16) values of a row from p, zero-padded to 16: a row's tail goes through the
// same vector FMAs as the rest of it. A scalar tail loop was compiled differently per tile shape
// (GCC vectorised some copies into products and in-order adds, without FMA), so one output alone
// could differ in its last bit from the same output of a wider tile.
template <typename T>
TORCHMT_VECTOR_INLINE f32x16 load16_tail(const T* p, int64_t rest) {
  T padded[kLanes] = {};
  std::memcpy(padded, p, static_cast<size_t>(rest) * sizeof(T));
  return load16_as_float(padded);
}

// out[m, n + r] = x[m] . w[n + r] + bias[n + r] for m < ROWS, r < COLS; x is fp32 [ROWS, K],
// the weight rows are K apart, out rows are ldo apart.
template <int ROWS, int COLS, typename T>
TORCHMT_VECTOR_INLINE void dot_block(const float* x, const T* w, const T* bias, int64_t K, T* out, int64_t ldo) {
  f32x16 acc[ROWS][COLS];
  for (int m = 0; m < ROWS; ++m)
    for (int r = 0; r < COLS; ++r) acc[m][r] = splat(0.0f);
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    f32x16 wv[COLS];
    for (int r = 0; r < COLS; ++r) {
      // Past the matrix's end it reads whatever follows (a prefetch never faults).
      __builtin_prefetch(reinterpret_cast<const char*>(w + r * K + k) + kPrefetchBytes, 0, 2);
      wv[r] = load16_as_float(w + r * K + k);
    }
    for (int m = 0; m < ROWS; ++m) {
      const f32x16 xv = load16(x + m * K + k);
      for (int r = 0; r < COLS; ++r) acc[m][r] += xv * wv[r];
    }
  }
  if (k < K) {
    f32x16 wv[COLS];
    for (int r = 0; r < COLS; ++r) wv[r] = load16_tail(w + r * K + k, K - k);
    for (int m = 0; m < ROWS; ++m) {
      const f32x16 xv = load16_tail(x + m * K + k, K - k);
      for (int r = 0; r < COLS; ++r) acc[m][r] += xv * wv[r];
    }
  }
  for (int m = 0; m < ROWS; ++m)
    for (int r = 0; r < COLS; ++r) {
      float s = tree_sum16(acc[m][r]);
      if (bias) s += load_as_float(bias + r);
      store_from_float(out + m * ldo + r, s);
    }
}

// dot_block with each 16-lane accumulator held as two 8-lane halves, for AVX2: GCC compiles
// 16-lane vectors for AVX2 by moving their pieces through the stack and general registers
// (the AVX2 clone of dot_block's 4 x 4 tile is mostly stack accesses), which made it slow.
// The same products, the same tree of adds
// (tree_sum16's): the same results as dot_block.
template <int ROWS, int COLS, Prefetch PREFETCH, typename T>
TORCHMT_VECTOR_INLINE void dot_block_halves(const float* x, const T* w, const T* bias, int64_t K, T* out,
                                            int64_t ldo) {
  f32x8 lo[ROWS][COLS], hi[ROWS][COLS];
  for (int m = 0; m < ROWS; ++m)
    for (int r = 0; r < COLS; ++r) lo[m][r] = hi[m][r] = f32x8{};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    f32x8 wlo[COLS], whi[COLS];
    for (int r = 0; r < COLS; ++r) {
      if constexpr (PREFETCH == Prefetch::kPerLine)
        __builtin_prefetch(reinterpret_cast<const char*>(w + r * K + k) + kPrefetchBytes, 0, 2);
      wlo[r] = load8_as_float(w + r * K + k);
      whi[r] = load8_as_float(w + r * K + k + 8);
    }
    for (int m = 0; m < ROWS; ++m) {
      const f32x8 xlo = load8_as_float(x + m * K + k), xhi = load8_as_float(x + m * K + k + 8);
      for (int r = 0; r < COLS; ++r) {
        lo[m][r] += xlo * wlo[r];
        hi[m][r] += xhi * whi[r];
      }
    }
  }
  if (k < K) {  // the tail, zero-padded as in dot_block
    const int64_t rest = K - k;
    float xpad[ROWS][kLanes] = {};
    T wpad[COLS][kLanes] = {};
    for (int m = 0; m < ROWS; ++m) std::memcpy(xpad[m], x + m * K + k, static_cast<size_t>(rest) * sizeof(float));
    for (int r = 0; r < COLS; ++r) std::memcpy(wpad[r], w + r * K + k, static_cast<size_t>(rest) * sizeof(T));
    for (int m = 0; m < ROWS; ++m)
      for (int r = 0; r < COLS; ++r) {
        lo[m][r] += load8_as_float(xpad[m]) * load8_as_float(wpad[r]);
        hi[m][r] += load8_as_float(xpad[m] + 8) * load8_as_float(wpad[r] + 8);
      }
  }
  for (int m = 0; m < ROWS; ++m)
    for (int r = 0; r < COLS; ++r) {
      float s = tree_sum16(lo[m][r], hi[m][r]);
      if (bias) s += load_as_float(bias + r);
      store_from_float(out + m * ldo + r, s);
    }
}

// dot_block (per-line prefetch only) or dot_block_halves.
template <int ROWS, int COLS, bool HALVES, Prefetch PREFETCH, typename T>
TORCHMT_VECTOR_INLINE void dot_block_as(const float* x, const T* w, const T* bias, int64_t K, T* out, int64_t ldo) {
  static_assert(HALVES || PREFETCH == Prefetch::kPerLine);
  if constexpr (HALVES) dot_block_halves<ROWS, COLS, PREFETCH>(x, w, bias, K, out, ldo);
  else dot_block<ROWS, COLS>(x, w, bias, K, out, ldo);
}

template <int COLS, int ROW_TILE, bool HALVES, Prefetch PREFETCH, typename T>
TORCHMT_VECTOR_INLINE void dot_columns(const float* x, int64_t rows, const T* w, const T* bias, int64_t K, T* out,
                                       int64_t ldo) {
  // The weight block (COLS rows of K) stays in L1 across the row tiles.
  for (int64_t m = 0; m < rows; m += ROW_TILE) {
    const float* xm = x + m * K;
    T* om = out + m * ldo;
    const int64_t tile = std::min<int64_t>(ROW_TILE, rows - m);
    if (tile >= ROW_TILE) dot_block_as<ROW_TILE, COLS, HALVES, PREFETCH>(xm, w, bias, K, om, ldo);
    else if (tile == 1) dot_block_as<1, COLS, HALVES, PREFETCH>(xm, w, bias, K, om, ldo);
    else if constexpr (ROW_TILE > 2) {
      if (tile == 2) dot_block_as<2, COLS, HALVES, PREFETCH>(xm, w, bias, K, om, ldo);
      else dot_block_as<3, COLS, HALVES, PREFETCH>(xm, w, bias, K, om, ldo);  // ROW_TILE is at most 4
    }
  }
}

TORCHMT_VECTOR_INLINE void prefetch_bytes(const void* p, int64_t bytes) {
  // Past the matrix's end it reads whatever follows (a prefetch never faults).
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(static_cast<const char*>(p) + b, 0, 3);
}

// Output features [n_begin, n_end) of out [rows, N], WEIGHT_TILE weight rows x ROW_TILE rows of
// x at a time.
template <int WEIGHT_TILE, int ROW_TILE, bool HALVES, Prefetch PREFETCH, typename T>
TORCHMT_VECTOR_INLINE void linear_columns(const float* x, int64_t rows, const T* w, const T* bias, int64_t K,
                                          int64_t N, int64_t n_begin, int64_t n_end, T* out) {
  const int64_t block = WEIGHT_TILE * K;  // weights per block of WEIGHT_TILE rows
  int64_t n = n_begin;
  if constexpr (PREFETCH == Prefetch::kBlockAhead)
    if (n_end - n_begin > WEIGHT_TILE) prefetch_bytes(w + n * K, 2 * block * int64_t{sizeof(T)});
  for (; n + WEIGHT_TILE <= n_end; n += WEIGHT_TILE) {
    if constexpr (PREFETCH == Prefetch::kBlockAhead) prefetch_bytes(w + n * K + 2 * block, block * int64_t{sizeof(T)});
    dot_columns<WEIGHT_TILE, ROW_TILE, HALVES, PREFETCH>(x, rows, w + n * K, bias ? bias + n : nullptr, K, out + n, N);
  }
  for (; n < n_end; ++n)
    dot_columns<1, ROW_TILE, HALVES, PREFETCH>(x, rows, w + n * K, bias ? bias + n : nullptr, K, out + n, N);
}

// One variant per instruction set, each with the tile its registers hold. A 16-lane vector is one
// AVX-512 register and two AVX2 ones: the AVX-512 tile (4 x 4 accumulators) as an AVX2 clone
// needed 32 + 8 + 2 of AVX2's 16 registers and spilled on every step, and target_clones'
// "avx2" has no FMA (a multiply and an add per product); hence 2 x 2 halves with FMA for AVX2.
// One row takes 4 weight rows at a time (more streams from memory) and prefetches a block
// ahead (Prefetch::kBlockAhead); the 2 x 2 tiles (beam 5, batch 1: five rows) ran slower with
// block-ahead prefetch and keep per-line prefetch (figures: tools/bench/DECISIONS.md).
template <typename T>
using LinearColumns = void (*)(const float*, int64_t, const T*, const T*, int64_t, int64_t, int64_t, int64_t, T*);

template <CpuIsa ISA, typename T>
void linear_columns_at(const float* x, int64_t rows, const T* w, const T* bias, int64_t K, int64_t N,
                       int64_t n_begin, int64_t n_end, T* out);

// Each level's tiles (the comment above).
template <CpuIsa ISA, typename T>
TORCHMT_VECTOR_INLINE void linear_columns_tiled(const float* x, int64_t rows, const T* w, const T* bias, int64_t K,
                                                int64_t N, int64_t n_begin, int64_t n_end, T* out) {
  if constexpr (ISA == CpuIsa::kAvx2) {
    if (rows == 1) linear_columns<4, 1, true, Prefetch::kBlockAhead>(x, rows, w, bias, K, N, n_begin, n_end, out);
    else linear_columns<2, 2, true, Prefetch::kPerLine>(x, rows, w, bias, K, N, n_begin, n_end, out);
  } else {
    linear_columns<kWeightTile, kRowTile, false, Prefetch::kPerLine>(x, rows, w, bias, K, N, n_begin, n_end, out);
  }
}

#define TORCHMT_LINEAR_COLUMNS_VARIANT(level, target, T)                                                         \
  template <>                                                                                                    \
  target void linear_columns_at<CpuIsa::level, T>(const float* x, int64_t rows, const T* w, const T* bias,        \
                                                  int64_t K, int64_t N, int64_t n_begin, int64_t n_end, T* out) { \
    linear_columns_tiled<CpuIsa::level>(x, rows, w, bias, K, N, n_begin, n_end, out);                            \
  }
TORCHMT_LINEAR_COLUMNS_VARIANT(kAvx512, TORCHMT_VECTOR_TARGET_AVX512, float)
TORCHMT_LINEAR_COLUMNS_VARIANT(kAvx512, TORCHMT_VECTOR_TARGET_AVX512, uint16_t)
TORCHMT_LINEAR_COLUMNS_VARIANT(kAvx2, TORCHMT_VECTOR_TARGET_AVX2, float)
TORCHMT_LINEAR_COLUMNS_VARIANT(kAvx2, TORCHMT_VECTOR_TARGET_AVX2, uint16_t)
TORCHMT_LINEAR_COLUMNS_VARIANT(kPortable, , float)
TORCHMT_LINEAR_COLUMNS_VARIANT(kPortable, , uint16_t)
#undef TORCHMT_LINEAR_COLUMNS_VARIANT

template <typename T>
LinearColumns<T> linear_columns_for(CpuIsa isa) {
  return isa_dispatch<CpuIsa::kAvx512, CpuIsa::kAvx2>(
      isa, [](auto level) -> LinearColumns<T> { return &linear_columns_at<level, T>; });
}

// Rows of bf16 x by AVX512-BF16's dot product: a variant for that level only (below it, x is
// widened to fp32 for linear_columns_at).
template <CpuIsa ISA>
void linear_columns_bf16_at(const uint16_t* x, int64_t rows, const uint16_t* w, const uint16_t* bias, int64_t K,
                            int64_t N, int64_t n_begin, int64_t n_end, uint16_t* out);

#if TORCHMT_X86
// GCC's _mm512_reduce_add_ps, add for add (bit-identical sums), with zeroed instead of
// undefined operands: GCC 12 warns (-Wmaybe-uninitialized) inside its own intrinsic.
TORCHMT_BF16_DOT_INLINE float reduce_add16(__m512 v) {
  const __m512d d = _mm512_castps_pd(v);
  const __m256 half = _mm256_add_ps(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, d, 1)),
                                    _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, d, 0)));
  const __m128 quarter = _mm_add_ps(_mm256_extractf128_ps(half, 1), _mm256_castps256_ps128(half));
  const __m128 pairs = _mm_add_ps(quarter, _mm_shuffle_ps(quarter, quarter, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtss_f32(pairs) + _mm_cvtss_f32(_mm_shuffle_ps(pairs, pairs, _MM_SHUFFLE(0, 1, 0, 1)));
}

// As dot_block, x and the weights bf16, pairs of K multiplied and added by vdpbf16ps.
template <int ROWS, int COLS>
TORCHMT_BF16_DOT_INLINE void dot_block_bf16_pairs(const uint16_t* x, const uint16_t* w, const uint16_t* bias,
                                                  int64_t K, uint16_t* out, int64_t ldo) {
  constexpr int64_t kStep = 32;  // bf16 values per 512-bit register
  __m512 acc[ROWS][COLS];
  for (int m = 0; m < ROWS; ++m)
    for (int r = 0; r < COLS; ++r) acc[m][r] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + kStep <= K; k += kStep) {
    __m512bh wv[COLS];
    for (int r = 0; r < COLS; ++r) wv[r] = (__m512bh)_mm512_loadu_si512(w + r * K + k);
    for (int m = 0; m < ROWS; ++m) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + m * K + k);
      for (int r = 0; r < COLS; ++r) acc[m][r] = _mm512_dpbf16_ps(acc[m][r], xv, wv[r]);
    }
  }
  for (int m = 0; m < ROWS; ++m)
    for (int r = 0; r < COLS; ++r) {
      // The same tree of half-width adds as tree_sum16 (bit-identical sums), as an intrinsic:
      // clang refuses to pass a 512-bit vector to a helper compiled without AVX-512.
      float s = reduce_add16(acc[m][r]);
      for (int64_t kk = k; kk < K; ++kk) s += bf16_to_float(x[m * K + kk]) * bf16_to_float(w[r * K + kk]);
      if (bias) s += bf16_to_float(bias[r]);
      out[m * ldo + r] = float_to_bf16(s);
    }
}

template <int COLS>
TORCHMT_BF16_DOT_INLINE void dot_columns_bf16_pairs(const uint16_t* x, int64_t rows, const uint16_t* w,
                                                    const uint16_t* bias, int64_t K, uint16_t* out, int64_t ldo) {
  for (int64_t m = 0; m < rows; m += kRowTile) {
    const uint16_t* xm = x + m * K;
    uint16_t* om = out + m * ldo;
    switch (std::min<int64_t>(kRowTile, rows - m)) {
      case 1: dot_block_bf16_pairs<1, COLS>(xm, w, bias, K, om, ldo); break;
      case 2: dot_block_bf16_pairs<2, COLS>(xm, w, bias, K, om, ldo); break;
      case 3: dot_block_bf16_pairs<3, COLS>(xm, w, bias, K, om, ldo); break;
      default: dot_block_bf16_pairs<4, COLS>(xm, w, bias, K, om, ldo); break;
    }
  }
}

template <>
TORCHMT_TARGET_AVX512_BF16 void linear_columns_bf16_at<CpuIsa::kAvx512Bf16>(
    const uint16_t* x, int64_t rows, const uint16_t* w, const uint16_t* bias, int64_t K, int64_t N, int64_t n_begin,
    int64_t n_end, uint16_t* out) {
  int64_t n = n_begin;
  for (; n + kWeightTile <= n_end; n += kWeightTile)
    dot_columns_bf16_pairs<kWeightTile>(x, rows, w + n * K, bias ? bias + n : nullptr, K, out + n, N);
  for (; n < n_end; ++n) dot_columns_bf16_pairs<1>(x, rows, w + n * K, bias ? bias + n : nullptr, K, out + n, N);
}
#endif

}  // namespace

float small_batch_dot_fp32(const float* x, const float* w_row, const float* bias, int64_t K) {
  float out = 0.0f;
  linear_columns_for<float>(cpu_isa())(x, 1, w_row, bias, K, 1, 0, 1, &out);
  return out;
}

at::Tensor try_small_batch_linear_cpu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!x.defined() || !x.device().is_cpu() || at::GradMode::is_enabled() || x.dim() < 1 || weight.dim() != 2 ||
      !weight.device().is_cpu())
    return {};
  const int64_t K = x.size(-1), N = weight.size(0);
  if (weight.size(1) != K || K == 0 || N == 0) return {};
  const int64_t rows = x.numel() / K;
  if (rows < 1 || rows > kSmallBatchLinearMaxRows) return {};

  // Under CPU autocast at::linear computes in the autocast dtype; do the same casts, with
  // parameters through autocast's cache so a weight is converted once per autocast region.
  at::ScalarType dtype = x.scalar_type();
  at::Tensor w = weight, b = bias;
  const at::ScalarType autocast_dtype = active_autocast_dtype(c10::Device(c10::kCPU));
  if (autocast_dtype != at::kFloat) {
    if (autocast_dtype != at::kBFloat16) return {};
    dtype = at::kBFloat16;
    w = at::autocast::cached_cast(dtype, weight, c10::DeviceType::CPU);
    if (b.defined()) b = at::autocast::cached_cast(dtype, bias, c10::DeviceType::CPU);
  }
  if ((dtype != at::kFloat && dtype != at::kBFloat16) || w.scalar_type() != dtype ||
      (b.defined() && (b.scalar_type() != dtype || b.numel() != N || !b.device().is_cpu())))
    return {};
  RECORD_FUNCTION("torchmt::small_batch_linear", std::vector<c10::IValue>());
  w = w.contiguous();
  if (b.defined()) b = b.contiguous();
  // x rounded to the compute dtype first, as at::linear sees it.
  const at::Tensor x_rows = x.reshape({rows, K}).to(dtype).contiguous();  // [rows, K]

  auto out_sizes = x.sizes().vec();
  out_sizes.back() = N;
  at::Tensor out = at::empty({rows, N}, x.options().dtype(dtype));  // [rows, N]
  // Each thread's share at least ~64 KB of weights, so a fork is worth it.
  const int64_t grain = std::max<int64_t>(kWeightTile, (int64_t{1} << 16) / (K * w.element_size()));
  const CpuIsa isa = cpu_isa();
  if (dtype == at::kFloat) {
    const LinearColumns<float> columns = linear_columns_for<float>(isa);
    const float* xp = x_rows.data_ptr<float>();
    const float* wp = w.data_ptr<float>();
    const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
    float* op = out.data_ptr<float>();
    parallel_for(0, N, grain, [&](int64_t n0, int64_t n1) { columns(xp, rows, wp, bp, K, N, n0, n1, op); });
  } else {
    const auto* wp = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
    const auto* bp = b.defined() ? reinterpret_cast<const uint16_t*>(b.data_ptr<at::BFloat16>()) : nullptr;
    auto* op = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
    const bool bf16_pairs = isa_dispatch<CpuIsa::kAvx512Bf16>(isa, [&](auto level) {
      if constexpr (level == CpuIsa::kPortable) {
        return false;
      } else {
        constexpr CpuIsa kLevel = decltype(level)::value;
        const auto* xp = reinterpret_cast<const uint16_t*>(x_rows.data_ptr<at::BFloat16>());
        parallel_for(0, N, grain,
                     [&](int64_t n0, int64_t n1) { linear_columns_bf16_at<kLevel>(xp, rows, wp, bp, K, N, n0, n1, op); });
        return true;
      }
    });
    if (bf16_pairs) return out.view(out_sizes);
    const LinearColumns<uint16_t> columns = linear_columns_for<uint16_t>(isa);
    const at::Tensor x_fp32 = x_rows.to(at::kFloat);
    const float* xp = x_fp32.data_ptr<float>();
    parallel_for(0, N, grain, [&](int64_t n0, int64_t n1) { columns(xp, rows, wp, bp, K, N, n0, n1, op); });
  }
  return out.view(out_sizes);
}

}  // namespace torchmt::kernels
