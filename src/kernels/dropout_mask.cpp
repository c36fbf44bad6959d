#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>
#include <type_traits>

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include "bf16_bits.h"
#include "primitives.h"
#include "vector.h"
#include "parallel.h"

namespace torchmt::kernels {
namespace {

// Keep decision of element `index`: a 32-bit multiply-xorshift hash of the absolute index
// keyed by the 64-bit seed, compared with p * 2^32. It depends only on (seed, index), so
// forward and backward agree and any split of the range over threads gives the same mask.
TORCHMT_VECTOR_INLINE bool keep(uint64_t index, uint64_t seed, uint32_t threshold) {
  uint32_t x = static_cast<uint32_t>(index) * 0x9E3779B9u ^ static_cast<uint32_t>(seed) ^
               static_cast<uint32_t>(index >> 32) * 0x85EBCA6Bu;
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x ^= static_cast<uint32_t>(seed >> 32);
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x >= threshold;
}

struct MaskParams {
  uint64_t seed;
  uint32_t threshold;  // p * 2^32
  float scale;         // 1 / (1 - p)
};

MaskParams mask_params(double p, uint64_t seed) {
  const double scaled = p * 4294967296.0;
  return {seed, static_cast<uint32_t>(std::min(scaled, 4294967295.0)), static_cast<float>(1.0 / (1.0 - p))};
}

// keep() for the 16 indices first, first + 1, ..., first + 15 at once, as int32 lanes of -1
// (kept) or 0; the same hash, so the same mask as keep() element by element. The caller keeps a
// block within one 2^32 span of indices (index >> 32 is one value for all 16).
TORCHMT_VECTOR_INLINE i32x16 keep16(uint64_t first, const MaskParams& m) {
  const u32x16 lanes = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  u32x16 x = (lanes + static_cast<uint32_t>(first)) * 0x9E3779B9u;
  x ^= static_cast<uint32_t>(m.seed) ^ static_cast<uint32_t>(first >> 32) * 0x85EBCA6Bu;
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x ^= static_cast<uint32_t>(m.seed >> 32);
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  // x >= threshold from the borrow of x - threshold, in integer arithmetic: GCC turns vector
  // comparisons whose results are combined into 16 scalar ones.
  const u32x16 t = u32x16{} + m.threshold;
  const u32x16 borrow = (~x & t) | (~(x ^ t) & (x - t));  // sign bit: x < t
  return ~(reinterpret_cast<i32x16>(borrow) >> 31);
}

// v > 0 lane by lane (-1 / 0), from the bits: sign clear and not all zero.
TORCHMT_VECTOR_INLINE i32x16 positive(f32x16 v) {
  const u32x16 bits = reinterpret_cast<u32x16>(v);
  return ~(reinterpret_cast<i32x16>(bits) >> 31) & (reinterpret_cast<i32x16>(u32x16{} - bits) >> 31);
}

// Whether the 16 indices from `first` share index >> 32 (keep16's condition).
TORCHMT_VECTOR_INLINE bool one_span(uint64_t first) { return static_cast<uint32_t>(first) <= 0xFFFFFFFFu - 15u; }

// v's 16 lanes as elements first, ..., first + 15 under the mask: kept ones times the scale.
TORCHMT_VECTOR_INLINE f32x16 masked16(f32x16 v, uint64_t first, const MaskParams& m) {
  if (one_span(first)) return select<f32x16>(keep16(first, m), v * m.scale, splat(0.0f));
  for (int l = 0; l < kLanes; ++l) v[l] = keep(first + l, m.seed, m.threshold) ? v[l] * m.scale : 0.0f;
  return v;
}

// out[i] = in[i] * (keep(i) ? scale : 0) for i in [begin, end), in fp32 arithmetic; T is float
// or bf16 bits (uint16_t).
template <typename T>
TORCHMT_VECTOR_INLINE void mask_range_body(const T* in, T* out, int64_t begin, int64_t end, MaskParams m) {
  const f32x16 scale = splat(m.scale), zero = splat(0.0f);
  int64_t i = begin;
  for (; i + kLanes <= end && one_span(static_cast<uint64_t>(i)); i += kLanes) {
    const f32x16 v = load16_as_float(in + i);
    store16_from_float(out + i, select<f32x16>(keep16(static_cast<uint64_t>(i), m), v * scale, zero));
  }
  for (; i < end; ++i)
    store_from_float(out + i, load_as_float(in + i) * (keep(static_cast<uint64_t>(i), m.seed, m.threshold) ? m.scale : 0.0f));
}

TORCHMT_VECTOR_INLINE void mask_range_f32_body(const float* in, float* out, int64_t begin, int64_t end, MaskParams m) {
  mask_range_body(in, out, begin, end, m);
}
TORCHMT_VECTOR_INLINE void mask_range_bf16_body(const uint16_t* in, uint16_t* out, int64_t begin, int64_t end,
                                                MaskParams m) {
  mask_range_body(in, out, begin, end, m);
}

TORCHMT_VECTOR_KERNEL(void, mask_range_f32, mask_range_f32_body, (const float* in, float* out, int64_t begin, int64_t end, MaskParams m),
                      (in, out, begin, end, m))
TORCHMT_VECTOR_KERNEL(void, mask_range_bf16, mask_range_bf16_body,
                      (const uint16_t* in, uint16_t* out, int64_t begin, int64_t end, MaskParams m),
                      (in, out, begin, end, m))

template <typename scalar_t>
void mask_range_generic(const scalar_t* in, scalar_t* out, int64_t begin, int64_t end, MaskParams m) {
  for (int64_t i = begin; i < end; ++i)
    out[i] = static_cast<scalar_t>(static_cast<float>(in[i]) *
                                   (keep(static_cast<uint64_t>(i), m.seed, m.threshold) ? m.scale : 0.0f));
}

template <typename scalar_t>
void mask_range(const scalar_t* in, scalar_t* out, int64_t begin, int64_t end, MaskParams m) {
  if constexpr (std::is_same_v<scalar_t, float>) {
    mask_range_f32(in, out, begin, end, m);
  } else if constexpr (std::is_same_v<scalar_t, c10::BFloat16>) {
    mask_range_bf16(reinterpret_cast<const uint16_t*>(in), reinterpret_cast<uint16_t*>(out), begin, end, m);
  } else {
    mask_range_generic(in, out, begin, end, m);
  }
}

// Rows [r0, r1) of y = relu(h + bias) * mask: h and y [rows, F] (T: float or bf16 bits), bias
// [F] fp32; element (r, j) is index r * F + j of the mask.
template <typename T>
TORCHMT_VECTOR_INLINE void bias_relu_mask_rows_body(const T* h, const float* bias, T* y, int64_t F, int64_t r0,
                                                    int64_t r1, MaskParams m) {
  const f32x16 scale = splat(m.scale), zero = splat(0.0f);
  for (int64_t r = r0; r < r1; ++r) {
    const T* hr = h + r * F;
    T* yr = y + r * F;
    const auto row = static_cast<uint64_t>(r * F);
    int64_t j = 0;
    for (; j + kLanes <= F && one_span(row + static_cast<uint64_t>(j)); j += kLanes) {
      const f32x16 v = load16_as_float(hr + j) + load16(bias + j);
      const i32x16 kept = keep16(row + static_cast<uint64_t>(j), m) & positive(v);
      store16_from_float(yr + j, select<f32x16>(kept, v * scale, zero));
    }
    for (; j < F; ++j) {
      const float v = load_as_float(hr + j) + bias[j];
      store_from_float(yr + j, v > 0.0f && keep(row + static_cast<uint64_t>(j), m.seed, m.threshold) ? v * m.scale : 0.0f);
    }
  }
}

// Rows [r0, r1) of grad_h = (y > 0) ? grad_y * scale : 0, and their sum over the rows added
// into bias_grad [F] (fp32).
template <typename T>
TORCHMT_VECTOR_INLINE void relu_mask_backward_rows_body(const T* grad_y, const T* y, T* grad_h, float* bias_grad,
                                                        int64_t F, int64_t r0, int64_t r1, float scale_) {
  const f32x16 scale = splat(scale_), zero = splat(0.0f);
  for (int64_t r = r0; r < r1; ++r) {
    const T* gr = grad_y + r * F;
    const T* yr = y + r * F;
    T* out = grad_h + r * F;
    int64_t j = 0;
    for (; j + kLanes <= F; j += kLanes) {
      const f32x16 g = select<f32x16>(positive(load16_as_float(yr + j)), load16_as_float(gr + j) * scale, zero);
      store16_from_float(out + j, g);
      store16(bias_grad + j, load16(bias_grad + j) + load16_as_float(out + j));
    }
    for (; j < F; ++j) {
      store_from_float(out + j, load_as_float(yr + j) > 0.0f ? load_as_float(gr + j) * scale_ : 0.0f);
      bias_grad[j] += load_as_float(out + j);
    }
  }
}

TORCHMT_VECTOR_INLINE void bias_relu_mask_rows_f32_body(const float* h, const float* bias, float* y, int64_t F,
                                                        int64_t r0, int64_t r1, MaskParams m) {
  bias_relu_mask_rows_body(h, bias, y, F, r0, r1, m);
}
TORCHMT_VECTOR_INLINE void bias_relu_mask_rows_bf16_body(const uint16_t* h, const float* bias, uint16_t* y, int64_t F,
                                                         int64_t r0, int64_t r1, MaskParams m) {
  bias_relu_mask_rows_body(h, bias, y, F, r0, r1, m);
}
TORCHMT_VECTOR_INLINE void relu_mask_backward_rows_f32_body(const float* grad_y, const float* y, float* grad_h,
                                                            float* bias_grad, int64_t F, int64_t r0, int64_t r1,
                                                            float scale) {
  relu_mask_backward_rows_body(grad_y, y, grad_h, bias_grad, F, r0, r1, scale);
}
TORCHMT_VECTOR_INLINE void relu_mask_backward_rows_bf16_body(const uint16_t* grad_y, const uint16_t* y,
                                                             uint16_t* grad_h, float* bias_grad, int64_t F, int64_t r0,
                                                             int64_t r1, float scale) {
  relu_mask_backward_rows_body(grad_y, y, grad_h, bias_grad, F, r0, r1, scale);
}

TORCHMT_VECTOR_KERNEL(void, bias_relu_mask_rows_f32, bias_relu_mask_rows_f32_body,
                      (const float* h, const float* bias, float* y, int64_t F, int64_t r0, int64_t r1, MaskParams m),
                      (h, bias, y, F, r0, r1, m))
TORCHMT_VECTOR_KERNEL(void, bias_relu_mask_rows_bf16, bias_relu_mask_rows_bf16_body,
                      (const uint16_t* h, const float* bias, uint16_t* y, int64_t F, int64_t r0, int64_t r1,
                       MaskParams m),
                      (h, bias, y, F, r0, r1, m))
TORCHMT_VECTOR_KERNEL(void, relu_mask_backward_rows_f32, relu_mask_backward_rows_f32_body,
                      (const float* grad_y, const float* y, float* grad_h, float* bias_grad, int64_t F, int64_t r0,
                       int64_t r1, float scale),
                      (grad_y, y, grad_h, bias_grad, F, r0, r1, scale))
TORCHMT_VECTOR_KERNEL(void, relu_mask_backward_rows_bf16, relu_mask_backward_rows_bf16_body,
                      (const uint16_t* grad_y, const uint16_t* y, uint16_t* grad_h, float* bias_grad, int64_t F,
                       int64_t r0, int64_t r1, float scale),
                      (grad_y, y, grad_h, bias_grad, F, r0, r1, scale))

// out[i] = x[i] + (keep(i) ? y[i] * scale : 0) for i in [begin, end) in fp32 arithmetic, rounded
// once to x's type: X and Y float or bf16 bits.
template <typename X, typename Y>
TORCHMT_VECTOR_INLINE void residual_mask_range_body(const X* x, const Y* y, X* out, int64_t begin, int64_t end,
                                                    MaskParams m) {
  const f32x16 scale = splat(m.scale), zero = splat(0.0f);
  int64_t i = begin;
  for (; i + kLanes <= end && one_span(static_cast<uint64_t>(i)); i += kLanes) {
    const f32x16 v = select<f32x16>(keep16(static_cast<uint64_t>(i), m), load16_as_float(y + i) * scale, zero);
    store16_from_float(out + i, load16_as_float(x + i) + v);
  }
  for (; i < end; ++i)
    store_from_float(out + i, load_as_float(x + i) + (keep(static_cast<uint64_t>(i), m.seed, m.threshold)
                                                          ? load_as_float(y + i) * m.scale
                                                          : 0.0f));
}

// out[i] = keep(i) ? g[i] * scale : 0, from fp32 g into bf16 bits.
TORCHMT_VECTOR_INLINE void mask_into_range_bf16_body(const float* g, uint16_t* out, int64_t begin, int64_t end,
                                                     MaskParams m) {
  const f32x16 scale = splat(m.scale), zero = splat(0.0f);
  int64_t i = begin;
  for (; i + kLanes <= end && one_span(static_cast<uint64_t>(i)); i += kLanes)
    store16_from_float(out + i, select<f32x16>(keep16(static_cast<uint64_t>(i), m), load16(g + i) * scale, zero));
  for (; i < end; ++i)
    store_from_float(out + i, keep(static_cast<uint64_t>(i), m.seed, m.threshold) ? g[i] * m.scale : 0.0f);
}

TORCHMT_VECTOR_INLINE void residual_mask_range_f32_body(const float* x, const float* y, float* out, int64_t begin,
                                                        int64_t end, MaskParams m) {
  residual_mask_range_body(x, y, out, begin, end, m);
}
TORCHMT_VECTOR_INLINE void residual_mask_range_f32_bf16_body(const float* x, const uint16_t* y, float* out,
                                                             int64_t begin, int64_t end, MaskParams m) {
  residual_mask_range_body(x, y, out, begin, end, m);
}
TORCHMT_VECTOR_INLINE void residual_mask_range_bf16_body(const uint16_t* x, const uint16_t* y, uint16_t* out,
                                                         int64_t begin, int64_t end, MaskParams m) {
  residual_mask_range_body(x, y, out, begin, end, m);
}
TORCHMT_VECTOR_KERNEL(void, residual_mask_range_f32, residual_mask_range_f32_body,
                      (const float* x, const float* y, float* out, int64_t begin, int64_t end, MaskParams m),
                      (x, y, out, begin, end, m))
TORCHMT_VECTOR_KERNEL(void, residual_mask_range_f32_bf16, residual_mask_range_f32_bf16_body,
                      (const float* x, const uint16_t* y, float* out, int64_t begin, int64_t end, MaskParams m),
                      (x, y, out, begin, end, m))
TORCHMT_VECTOR_KERNEL(void, residual_mask_range_bf16, residual_mask_range_bf16_body,
                      (const uint16_t* x, const uint16_t* y, uint16_t* out, int64_t begin, int64_t end, MaskParams m),
                      (x, y, out, begin, end, m))
TORCHMT_VECTOR_KERNEL(void, mask_into_range_bf16, mask_into_range_bf16_body,
                      (const float* g, uint16_t* out, int64_t begin, int64_t end, MaskParams m), (g, out, begin, end, m))

// Attention's weights [rows, keys] of a [B, H, Tq, Tk] score tensor, one row at a time.
struct SoftmaxRows {
  int64_t heads, queries, keys;
  int64_t m_stride_b, m_stride_h, m_stride_q, m_stride_t;  // the mask expanded to the scores' shape
  int64_t elements, mask_elements;  // the scores' and the mask's storage, for reads past a row's end
  float scale;
};

// 16 values from p as fp32, of which the first n matter: past them a full load where it stays in
// [p, end), else zeros (a copy through a padded buffer stalls the load that follows it).
template <typename T>
TORCHMT_VECTOR_INLINE f32x16 load16_row(const T* p, int64_t n, const T* end) {
  if (n >= kLanes || p + kLanes <= end) return load16_as_float(p);
  f32x16 v = splat(0.0f);
  for (int64_t l = 0; l < n; ++l) v[l] = load_as_float(p + l);
  return v;
}
// The mask's 16 entries from m (stride apart): -1 where true; lanes from n on are the caller's.
TORCHMT_VECTOR_INLINE i32x16 allowed16(const bool* m, int64_t stride, int64_t n, const bool* end) {
  using u8x16 = uint8_t __attribute__((vector_size(16)));
  u8x16 bytes = u8x16{};
  if (stride == 1 && (n >= kLanes || m + kLanes <= end))
    std::memcpy(&bytes, m, sizeof bytes);
  else
    for (int64_t l = 0; l < n && l < kLanes; ++l) bytes[l] = m[l * stride] ? 1 : 0;
  return __builtin_convertvector(bytes != 0, i32x16);
}
// v's first n lanes stored to p: all 16 where they stay before `end` (lanes past n land on later
// rows of the caller's range, which it writes afterwards), else n through a padded buffer.
template <typename T>
TORCHMT_VECTOR_INLINE void store16_first(T* p, f32x16 v, int64_t n, const T* end) {
  if (n >= kLanes || p + kLanes <= end) return store16_from_float(p, v);
  T padded[kLanes];
  store16_from_float(padded, v);
  std::memcpy(p, padded, sizeof(T) * static_cast<size_t>(n));
}

// Rows [r0, r1): y = softmax(s * scale) over the allowed keys (a row with none allowed takes every
// key, as without_empty_rows), d = y with the mask for (seed, index) applied (skipped when d is
// null); fp32 arithmetic, each output rounded once. x: scratch of keys + 16 floats.
template <typename T>
TORCHMT_VECTOR_INLINE void softmax_dropout_rows_body(const T* s, const bool* mask, const SoftmaxRows& g, T* y, T* d,
                                                     int64_t r0, int64_t r1, MaskParams m, float* x) {
  const int64_t keys = g.keys;
  const f32x16 neg_inf = splat(-std::numeric_limits<float>::infinity()), zero = splat(0.0f);
  const f32x16 scale = splat(g.scale);
  const i32x16 lane_index = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  const T* s_end = s + g.elements;
  const bool* mask_end = mask ? mask + g.mask_elements : nullptr;
  const T* y_end = y + r1 * keys;  // this call's rows
  const T* d_end = d ? d + r1 * keys : nullptr;
  int64_t q = r0 % g.queries, h = r0 / g.queries % g.heads, b = r0 / (g.heads * g.queries);
  for (int64_t r = r0; r < r1; ++r) {
    const bool* mr = mask ? mask + b * g.m_stride_b + h * g.m_stride_h + q * g.m_stride_q : nullptr;
    if (++q == g.queries) {
      q = 0;
      if (++h == g.heads) h = 0, ++b;
    }
    const T* sr = s + r * keys;
    // x = s * scale where allowed, -inf elsewhere and past the row's end (to a multiple of 16);
    // lane_bad: NaN where an allowed score is inf or NaN.
    f32x16 lane_max, lane_bad;
    auto scaled = [&] {
      lane_max = neg_inf;
      lane_bad = zero;
      for (int64_t j = 0; j < keys; j += kLanes) {
        const int64_t n = keys - j;
        i32x16 allowed = lane_index < static_cast<int32_t>(n < kLanes ? n : kLanes);
        if (mr) allowed &= allowed16(mr + j * g.m_stride_t, g.m_stride_t, n, mask_end);
        const f32x16 v = select<f32x16>(allowed, load16_row(sr + j, n, s_end) * scale, neg_inf);
        store16(x + j, v);
        lane_max = max_lanes(v, lane_max);
        lane_bad += select<f32x16>(allowed, v * 0.0f, zero);
      }
    };
    scaled();
    float max = tree_max16(lane_max);
    if (mr && max == -std::numeric_limits<float>::infinity()) {
      bool some = false;
      for (int64_t j = 0; j < keys && !some; ++j) some = mr[j * g.m_stride_t];
      if (!some) {  // nothing allowed: every key
        mr = nullptr;
        scaled();
        max = tree_max16(lane_max);
      }
    }
    // exp(x - max), 0 where x is -inf (exp_nonpositive(-inf) is exp(-87)).
    f32x16 lane_sum = lane_bad;
    const f32x16 max16 = splat(max);
    for (int64_t j = 0; j < keys; j += kLanes) {
      const f32x16 v = load16(x + j);
      const f32x16 e = select<f32x16>(v > neg_inf, exp_nonpositive(v - max16), zero);
      store16(x + j, e);
      lane_sum += e;
    }
    float total = tree_sum16(lane_sum);
    if (!std::isfinite(total)) {
      // An inf or NaN score: std::exp, whose NaNs propagate as ATen's softmax's do.
      total = 0.0f;
      for (int64_t j = 0; j < keys; ++j) {
        const bool allowed = mr == nullptr || mr[j * g.m_stride_t];
        x[j] = allowed ? std::exp(load_as_float(sr + j) * g.scale - max) : 0.0f;
        total += x[j];
      }
    }
    const f32x16 inv = splat(1.0f / total);
    T* yr = y + r * keys;
    T* dr = d ? d + r * keys : nullptr;
    const uint64_t first = static_cast<uint64_t>(r * keys);
    for (int64_t j = 0; j < keys; j += kLanes) {
      const f32x16 p = load16(x + j) * inv;
      store16_first(yr + j, p, keys - j, y_end);
      if (dr == nullptr) continue;
      store16_first(dr + j, masked16(p, first + j, m), keys - j, d_end);
    }
  }
}

// Rows [r0, r1) of the scores' gradient from the weights' (grad_d) and the softmax y:
// g = grad_d with the mask applied (when dropout), grad_s = scale * y * (g - sum(g * y)). All
// three [rows, keys]; `elements`: their size, for reads past a row's end.
template <typename T>
TORCHMT_VECTOR_INLINE void softmax_dropout_backward_rows_body(const T* grad_d, const T* y, T* grad_s, int64_t keys,
                                                              int64_t elements, int64_t r0, int64_t r1, float scale,
                                                              bool dropout, MaskParams m, float* x) {
  const f32x16 zero = splat(0.0f), scale16 = splat(scale);
  const i32x16 lane_index = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  const T* g_end = grad_d + elements;
  const T* y_end = y + elements;
  T* out_end = grad_s + r1 * keys;  // this call's rows
  for (int64_t r = r0; r < r1; ++r) {
    const T* gr = grad_d + r * keys;
    const T* yr = y + r * keys;
    const uint64_t first = static_cast<uint64_t>(r * keys);
    f32x16 lane_dot = zero;
    for (int64_t j = 0; j < keys; j += kLanes) {
      const int64_t n = keys - j;
      const i32x16 in_row = lane_index < static_cast<int32_t>(n < kLanes ? n : kLanes);
      f32x16 gv = select<f32x16>(in_row, load16_row(gr + j, n, g_end), zero);
      if (dropout) gv = masked16(gv, first + j, m);
      store16(x + j, gv);
      lane_dot += gv * select<f32x16>(in_row, load16_row(yr + j, n, y_end), zero);
    }
    const f32x16 dot16 = splat(tree_sum16(lane_dot));
    T* out = grad_s + r * keys;
    for (int64_t j = 0; j < keys; j += kLanes)
      store16_first(out + j, scale16 * load16_row(yr + j, keys - j, y_end) * (load16(x + j) - dot16), keys - j, out_end);
  }
}

TORCHMT_VECTOR_INLINE void softmax_dropout_rows_f32_body(const float* s, const bool* mask, const SoftmaxRows& g,
                                                         float* y, float* d, int64_t r0, int64_t r1, MaskParams m,
                                                         float* x) {
  softmax_dropout_rows_body(s, mask, g, y, d, r0, r1, m, x);
}
TORCHMT_VECTOR_INLINE void softmax_dropout_rows_bf16_body(const uint16_t* s, const bool* mask, const SoftmaxRows& g,
                                                          uint16_t* y, uint16_t* d, int64_t r0, int64_t r1,
                                                          MaskParams m, float* x) {
  softmax_dropout_rows_body(s, mask, g, y, d, r0, r1, m, x);
}
TORCHMT_VECTOR_INLINE void softmax_dropout_backward_rows_f32_body(const float* grad_d, const float* y, float* grad_s,
                                                                  int64_t keys, int64_t elements, int64_t r0,
                                                                  int64_t r1, float scale, bool dropout, MaskParams m,
                                                                  float* x) {
  softmax_dropout_backward_rows_body(grad_d, y, grad_s, keys, elements, r0, r1, scale, dropout, m, x);
}
TORCHMT_VECTOR_INLINE void softmax_dropout_backward_rows_bf16_body(const uint16_t* grad_d, const uint16_t* y,
                                                                   uint16_t* grad_s, int64_t keys, int64_t elements,
                                                                   int64_t r0, int64_t r1, float scale, bool dropout,
                                                                   MaskParams m, float* x) {
  softmax_dropout_backward_rows_body(grad_d, y, grad_s, keys, elements, r0, r1, scale, dropout, m, x);
}
TORCHMT_VECTOR_KERNEL(void, softmax_dropout_rows_f32, softmax_dropout_rows_f32_body,
                      (const float* s, const bool* mask, const SoftmaxRows& g, float* y, float* d, int64_t r0,
                       int64_t r1, MaskParams m, float* x),
                      (s, mask, g, y, d, r0, r1, m, x))
TORCHMT_VECTOR_KERNEL(void, softmax_dropout_rows_bf16, softmax_dropout_rows_bf16_body,
                      (const uint16_t* s, const bool* mask, const SoftmaxRows& g, uint16_t* y, uint16_t* d,
                       int64_t r0, int64_t r1, MaskParams m, float* x),
                      (s, mask, g, y, d, r0, r1, m, x))
TORCHMT_VECTOR_KERNEL(void, softmax_dropout_backward_rows_f32, softmax_dropout_backward_rows_f32_body,
                      (const float* grad_d, const float* y, float* grad_s, int64_t keys, int64_t elements, int64_t r0,
                       int64_t r1, float scale, bool dropout, MaskParams m, float* x),
                      (grad_d, y, grad_s, keys, elements, r0, r1, scale, dropout, m, x))
TORCHMT_VECTOR_KERNEL(void, softmax_dropout_backward_rows_bf16, softmax_dropout_backward_rows_bf16_body,
                      (const uint16_t* grad_d, const uint16_t* y, uint16_t* grad_s, int64_t keys, int64_t elements,
                       int64_t r0, int64_t r1, float scale, bool dropout, MaskParams m, float* x),
                      (grad_d, y, grad_s, keys, elements, r0, r1, scale, dropout, m, x))

}  // namespace

at::Tensor hashed_dropout_mask(const at::Tensor& x, double p, uint64_t seed) {
  RECORD_FUNCTION("torchmt::hashed_dropout", std::vector<c10::IValue>{});
  auto in = x.contiguous();
  auto out = at::empty_like(in, at::MemoryFormat::Contiguous);
  const MaskParams params = mask_params(p, seed);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, in.scalar_type(), "hashed_dropout", [&] {
    const scalar_t* src = in.data_ptr<scalar_t>();
    scalar_t* dst = out.data_ptr<scalar_t>();
    parallel_for(0, in.numel(), 32768, [&](int64_t begin, int64_t end) { mask_range(src, dst, begin, end, params); });
  });
  return out;
}

bool fused_bias_relu_dropout_applies(const at::Tensor& h, const at::Tensor& bias, double p) {
  return p >= 0.0 && p < 1.0 && h.device().is_cpu() &&
         (h.scalar_type() == at::kFloat || h.scalar_type() == at::kBFloat16) && h.dim() >= 1 && bias.defined() &&
         bias.device().is_cpu() && bias.scalar_type() == at::kFloat && bias.dim() == 1 && bias.size(0) == h.size(-1) &&
         h.size(-1) > 0;
}

at::Tensor bias_relu_dropout_forward(const at::Tensor& h, const at::Tensor& bias, double p, uint64_t seed) {
  RECORD_FUNCTION("torchmt::bias_relu_dropout", std::vector<c10::IValue>{});
  TORCH_CHECK(fused_bias_relu_dropout_applies(h, bias, p), "bias_relu_dropout_forward: unsupported inputs");
  auto in = h.contiguous();
  auto b = bias.contiguous();
  auto out = at::empty_like(in, at::MemoryFormat::Contiguous);
  const int64_t F = in.size(-1), rows = in.numel() / F;
  const MaskParams params = mask_params(p, seed);
  const float* bp = b.data_ptr<float>();
  const int64_t grain = std::max<int64_t>(1, 32768 / F);
  if (in.scalar_type() == at::kFloat) {
    const float* src = in.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) { bias_relu_mask_rows_f32(src, bp, dst, F, r0, r1, params); });
  } else {
    const uint16_t* src = bf16_bits(in);
    uint16_t* dst = bf16_bits(out);
    parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) { bias_relu_mask_rows_bf16(src, bp, dst, F, r0, r1, params); });
  }
  return out;
}

std::pair<at::Tensor, at::Tensor> bias_relu_dropout_backward(const at::Tensor& grad_y, const at::Tensor& y, double p) {
  RECORD_FUNCTION("torchmt::bias_relu_dropout_backward", std::vector<c10::IValue>{});
  auto g = grad_y.to(y.scalar_type()).contiguous();
  auto yc = y.contiguous();
  auto grad_h = at::empty_like(yc, at::MemoryFormat::Contiguous);
  const int64_t F = yc.size(-1), rows = yc.numel() / F;
  // The bias gradient's sums per fixed row block (the same on any thread count).
  auto partial = at::zeros({row_sum_blocks(rows), F}, yc.options().dtype(at::kFloat));  // [blocks, F]
  float* pp = partial.data_ptr<float>();
  const auto scale = static_cast<float>(1.0 / (1.0 - p));
  for_each_row_sum_block(rows, [&](int64_t blk, int64_t r0, int64_t r1) {
    if (yc.scalar_type() == at::kFloat)
      relu_mask_backward_rows_f32(g.data_ptr<float>(), yc.data_ptr<float>(), grad_h.data_ptr<float>(), pp + blk * F, F,
                                  r0, r1, scale);
    else
      relu_mask_backward_rows_bf16(bf16_bits(g), bf16_bits(yc), bf16_bits(grad_h), pp + blk * F, F, r0, r1, scale);
  });
  return {grad_h, partial.sum(0)};  // [F]
}

bool fused_residual_dropout_applies(const at::Tensor& x, const at::Tensor& y, double p) {
  const auto tx = x.scalar_type(), ty = y.scalar_type();
  const bool types = (tx == at::kFloat && (ty == at::kFloat || ty == at::kBFloat16)) ||
                     (tx == at::kBFloat16 && ty == at::kBFloat16);
  return p >= 0.0 && p < 1.0 && types && x.device().is_cpu() && y.device().is_cpu() && x.sizes() == y.sizes();
}

at::Tensor residual_dropout_forward(const at::Tensor& x, const at::Tensor& y, double p, uint64_t seed) {
  RECORD_FUNCTION("torchmt::residual_dropout", std::vector<c10::IValue>{});
  TORCH_CHECK(fused_residual_dropout_applies(x, y, p), "residual_dropout_forward: unsupported inputs");
  auto xc = x.contiguous(), yc = y.contiguous();
  auto out = at::empty_like(xc, at::MemoryFormat::Contiguous);
  const MaskParams params = mask_params(p, seed);
  if (xc.scalar_type() == at::kBFloat16) {
    const uint16_t *xp = bf16_bits(xc), *yp = bf16_bits(yc);
    uint16_t* op = bf16_bits(out);
    parallel_for(0, xc.numel(), 32768, [&](int64_t b, int64_t e) { residual_mask_range_bf16(xp, yp, op, b, e, params); });
  } else if (yc.scalar_type() == at::kBFloat16) {
    const float* xp = xc.data_ptr<float>();
    const uint16_t* yp = bf16_bits(yc);
    float* op = out.data_ptr<float>();
    parallel_for(0, xc.numel(), 32768,
                 [&](int64_t b, int64_t e) { residual_mask_range_f32_bf16(xp, yp, op, b, e, params); });
  } else {
    const float *xp = xc.data_ptr<float>(), *yp = yc.data_ptr<float>();
    float* op = out.data_ptr<float>();
    parallel_for(0, xc.numel(), 32768, [&](int64_t b, int64_t e) { residual_mask_range_f32(xp, yp, op, b, e, params); });
  }
  return out;
}

at::Tensor hashed_dropout_mask_into(const at::Tensor& grad, double p, uint64_t seed, at::ScalarType dtype) {
  if (grad.scalar_type() != at::kFloat || dtype != at::kBFloat16) return hashed_dropout_mask(grad, p, seed).to(dtype);
  RECORD_FUNCTION("torchmt::hashed_dropout", std::vector<c10::IValue>{});
  auto g = grad.contiguous();
  auto out = at::empty(g.sizes(), g.options().dtype(dtype));
  const MaskParams params = mask_params(p, seed);
  const float* gp = g.data_ptr<float>();
  uint16_t* op = bf16_bits(out);
  parallel_for(0, g.numel(), 32768, [&](int64_t b, int64_t e) { mask_into_range_bf16(gp, op, b, e, params); });
  return out;
}

bool attention_softmax_dropout_applies(const at::Tensor& scores, const at::Tensor& mask, double p) {
  if (!(p >= 0.0 && p < 1.0) || !scores.device().is_cpu() || scores.dim() != 4 || !scores.is_contiguous() ||
      (scores.scalar_type() != at::kFloat && scores.scalar_type() != at::kBFloat16))
    return false;
  if (!mask.defined()) return true;
  if (mask.scalar_type() != at::kBool || !mask.device().is_cpu() || mask.dim() > 4) return false;
  for (int64_t i = 1; i <= mask.dim(); ++i)  // right-aligned broadcast to the scores' shape
    if (mask.size(-i) != 1 && mask.size(-i) != scores.size(-i)) return false;
  return true;
}

std::pair<at::Tensor, at::Tensor> attention_softmax_dropout_forward(const at::Tensor& scores, const at::Tensor& mask,
                                                                    double scale, double p, uint64_t seed) {
  RECORD_FUNCTION("torchmt::attention_softmax_dropout", std::vector<c10::IValue>{});
  TORCH_CHECK(attention_softmax_dropout_applies(scores, mask, p), "attention_softmax_dropout_forward: unsupported inputs");
  SoftmaxRows g{scores.size(1), scores.size(2), scores.size(3), 0, 0, 0, 0, scores.numel(), 0, static_cast<float>(scale)};
  at::Tensor expanded;
  if (mask.defined()) {
    expanded = mask.expand(scores.sizes());  // [B, H, Tq, Tk], strides 0 where broadcast
    g.m_stride_b = expanded.stride(0);
    g.m_stride_h = expanded.stride(1);
    g.m_stride_q = expanded.stride(2);
    g.m_stride_t = expanded.stride(3);
    for (int64_t i = 0; i < 4; ++i) g.mask_elements += (expanded.size(i) - 1) * expanded.stride(i);
    g.mask_elements += 1;  // one past the last entry the rows reach
  }
  const bool* mp = expanded.defined() ? expanded.data_ptr<bool>() : nullptr;
  auto y = at::empty_like(scores);
  at::Tensor d = p > 0.0 ? at::empty_like(scores) : y;
  const MaskParams params = mask_params(p, seed);
  const int64_t rows = g.keys > 0 ? scores.numel() / g.keys : 0;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, g.keys));
  parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) {
    std::vector<float> x(static_cast<size_t>(g.keys + kLanes));
    if (scores.scalar_type() == at::kFloat)
      softmax_dropout_rows_f32(scores.data_ptr<float>(), mp, g, y.data_ptr<float>(),
                               p > 0.0 ? d.data_ptr<float>() : nullptr, r0, r1, params, x.data());
    else
      softmax_dropout_rows_bf16(bf16_bits(scores), mp, g, bf16_bits(y), p > 0.0 ? bf16_bits(d) : nullptr, r0, r1,
                                params, x.data());
  });
  return {y, d};
}

at::Tensor attention_softmax_dropout_backward(const at::Tensor& grad, const at::Tensor& y, double scale, double p,
                                              uint64_t seed) {
  RECORD_FUNCTION("torchmt::attention_softmax_dropout_backward", std::vector<c10::IValue>{});
  TORCH_CHECK(y.is_contiguous() && grad.sizes() == y.sizes(), "attention_softmax_dropout_backward: y and grad");
  auto g = grad.to(y.scalar_type()).contiguous();
  auto out = at::empty_like(y);
  const int64_t keys = y.size(-1), rows = keys > 0 ? y.numel() / keys : 0;
  const MaskParams params = mask_params(p, seed);
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, keys));
  parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) {
    std::vector<float> x(static_cast<size_t>(keys + kLanes));
    if (y.scalar_type() == at::kFloat)
      softmax_dropout_backward_rows_f32(g.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), keys,
                                        y.numel(), r0, r1, static_cast<float>(scale), p > 0.0, params, x.data());
    else
      softmax_dropout_backward_rows_bf16(bf16_bits(g), bf16_bits(y), bf16_bits(out), keys, y.numel(), r0, r1,
                                         static_cast<float>(scale), p > 0.0, params, x.data());
  });
  return out;
}

}  // namespace torchmt::kernels
