#include "primitives.h"

#include <cmath>
#include <cstring>
#include <limits>

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include "bf16_bits.h"
#include "vector.h"
#include "torchmt/util/device.h"
#include "parallel.h"

namespace torchmt::kernels {
namespace {

bool inference_on_cpu(const at::Tensor& x) {
  return !at::GradMode::is_enabled() && x.device().is_cpu() &&
         (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16) &&
         active_autocast_dtype(x.device()) == at::kFloat;
}

// One element type's arithmetic as the composite does it: fp32 exact, bf16 rounded after
// every op (ATen's bf16 mul/add compute in fp32 and round the result).
TORCHMT_VECTOR_INLINE float round_as(const float*, float v) { return v; }
TORCHMT_VECTOR_INLINE float round_as(const uint16_t*, float v) { return bf16_to_float(float_to_bf16(v)); }
TORCHMT_VECTOR_INLINE void store16_as(float* p, f32x16 v) { store16(p, v); }
TORCHMT_VECTOR_INLINE void store16_as(uint16_t* p, f32x16 v) { store16_bf16(p, v); }

struct RotaryView {
  int64_t sizes[3];                 // B, H, T (d_k separately)
  int64_t dim;                      // d_k
  int64_t x_stride[3], out_stride[3], cos_stride[3], sin_stride[3];
  bool transposed;                  // the rotation's transpose: its backward
};

template <typename T>
TORCHMT_VECTOR_INLINE void rotary_rows(const T* x, const T* cos, const T* sin, T* out, const RotaryView& v,
                                       int64_t begin, int64_t end) {
  const int64_t half = v.dim / 2;
  // rotate_half(x) = [-x2, x1]; its transpose (the backward) is [x2, -x1] with each sine read
  // at the position it multiplied forward.
  const float sign = v.transposed ? -1.0f : 1.0f;
  const int64_t sin_low = v.transposed ? half : 0, sin_high = v.transposed ? -half : 0;
  for (int64_t row = begin; row < end; ++row) {
    const int64_t t = row % v.sizes[2], h = (row / v.sizes[2]) % v.sizes[1], b = row / (v.sizes[2] * v.sizes[1]);
    const T* xr = x + b * v.x_stride[0] + h * v.x_stride[1] + t * v.x_stride[2];
    const T* cr = cos + b * v.cos_stride[0] + h * v.cos_stride[1] + t * v.cos_stride[2];
    const T* sr = sin + b * v.sin_stride[0] + h * v.sin_stride[1] + t * v.sin_stride[2];
    T* orow = out + b * v.out_stride[0] + h * v.out_stride[1] + t * v.out_stride[2];
    for (int64_t j = 0; j < half; ++j) {
      const float a = round_as(xr, load_as_float(xr + j) * load_as_float(cr + j));
      const float c = round_as(xr, -sign * load_as_float(xr + j + half) * load_as_float(sr + j + sin_low));
      store_from_float(orow + j, a + c);
    }
    for (int64_t j = half; j < v.dim; ++j) {
      const float a = round_as(xr, load_as_float(xr + j) * load_as_float(cr + j));
      const float c = round_as(xr, sign * load_as_float(xr + j - half) * load_as_float(sr + j + sin_high));
      store_from_float(orow + j, a + c);
    }
  }
}

TORCHMT_VECTOR_KERNEL(void, rotary_rows_fp32, rotary_rows, (const float* x, const float* cos, const float* sin, float* out, const RotaryView& v, int64_t begin, int64_t end),
                      (x, cos, sin, out, v, begin, end))

TORCHMT_VECTOR_KERNEL(void, rotary_rows_bf16, rotary_rows, (const uint16_t* x, const uint16_t* cos, const uint16_t* sin, uint16_t* out, const RotaryView& v, int64_t begin, int64_t end),
                      (x, cos, sin, out, v, begin, end))

template <typename T>
TORCHMT_VECTOR_INLINE void add_norm_rows(const T* x, const T* y, const T* weight, const T* bias, float eps,
                                         int64_t dim, int64_t begin, int64_t end, T* sum, T* out,
                                         float* scratch) {
  const int64_t vec_end = dim - dim % kLanes;
  for (int64_t row = begin; row < end; ++row) {
    const T* xr = x + row * dim;
    const T* yr = y + row * dim;
    T* sr = sum + row * dim;
    // The sum as the composite's add leaves it (rounded to T); the moments are taken of its
    // offsets from the row's first value (exact for values near each other), so a row whose
    // mean is large against its spread keeps its low bits (a plain fp32 sum of 20 values near
    // 1000 gave twice ATen's error, which averages with Welford's method).
    const float pivot = round_as(xr, load_as_float(xr) + load_as_float(yr));
    f32x16 lanes = splat(0.0f);
    for (int64_t j = 0; j < vec_end; j += kLanes) {
      store16_as(sr + j, load16_as_float(xr + j) + load16_as_float(yr + j));
      const f32x16 s = load16_as_float(sr + j) - pivot;
      store16(scratch + j, s);
      lanes += s;
    }
    float total = tree_sum16(lanes);
    for (int64_t j = vec_end; j < dim; ++j) {
      store_from_float(sr + j, load_as_float(xr + j) + load_as_float(yr + j));
      total += scratch[j] = load_as_float(sr + j) - pivot;
    }
    float mean = 0.0f, rstd = 0.0f;  // the offsets' mean
    offset_moments(scratch, dim, total, eps, &mean, &rstd);
    // (x - mean) * rstd rather than ATen's x * rstd - mean * rstd, which loses the same low bits.
    T* orow = out + row * dim;
    for (int64_t j = 0; j < vec_end; j += kLanes)
      store16_as(orow + j, (load16(scratch + j) - mean) * rstd * load16_as_float(weight + j) + load16_as_float(bias + j));
    for (int64_t j = vec_end; j < dim; ++j)
      store_from_float(orow + j, (scratch[j] - mean) * rstd * load_as_float(weight + j) + load_as_float(bias + j));
  }
}

TORCHMT_VECTOR_KERNEL(void, add_norm_rows_fp32, add_norm_rows, (const float* x, const float* y, const float* weight, const float* bias, float eps, int64_t dim, int64_t begin, int64_t end, float* sum, float* out, float* scratch),
                      (x, y, weight, bias, eps, dim, begin, end, sum, out, scratch))

TORCHMT_VECTOR_KERNEL(void, add_norm_rows_bf16, add_norm_rows, (const uint16_t* x, const uint16_t* y, const uint16_t* weight, const uint16_t* bias, float eps, int64_t dim, int64_t begin, int64_t end, uint16_t* sum, uint16_t* out, float* scratch),
                      (x, y, weight, bias, eps, dim, begin, end, sum, out, scratch))

// log_softmax of rows [begin, end) of x [rows, n], in place, in 8-lane vectors (one AVX2
// register; GCC moves 16-lane vectors through the stack in AVX2 code): the maximum, the sum of
// exp(x - max) (exp_nonpositive), then x - max - log(sum). The tail of a row that is not a
// multiple of 8 through a copy padded with the maximum, whose padding lanes are not summed.
TORCHMT_VECTOR_INLINE void log_softmax_rows_body(float* x, int64_t n, int64_t begin, int64_t end) {
  constexpr int64_t kLanes8 = 8;
  const int64_t vec_end = n - n % kLanes8;
  for (int64_t row = begin; row < end; ++row) {
    float* r = x + row * n;
    f32x8 m8 = f32x8{} - std::numeric_limits<float>::infinity();
    i32x8 nan8 = i32x8{};
    for (int64_t j = 0; j < vec_end; j += kLanes8) {
      const f32x8 v = load8_as_float(r + j);
      m8 = max_lanes(v, m8);
      nan8 |= v != v;
    }
    float max = -std::numeric_limits<float>::infinity();
    bool nan = false;
    for (int l = 0; l < kLanes8; ++l) max = m8[l] > max ? m8[l] : max, nan = nan || nan8[l] != 0;
    for (int64_t j = vec_end; j < n; ++j) max = r[j] > max ? r[j] : max, nan = nan || std::isnan(r[j]);
    if (nan || !std::isfinite(max)) {  // a row of -inf, or with +inf or NaN: ATen's arithmetic, lane by lane
      float total = 0.0f;
      for (int64_t j = 0; j < n; ++j) total += std::exp(r[j] - max);
      const float shift = max + std::log(total);
      for (int64_t j = 0; j < n; ++j) r[j] -= shift;
      continue;
    }
    const f32x8 max8 = f32x8{} + max;
    f32x8 even = f32x8{}, odd = f32x8{};
    int64_t j = 0;
    for (; j + 2 * kLanes8 <= vec_end; j += 2 * kLanes8) {
      even += exp_nonpositive(load8_as_float(r + j) - max8);
      odd += exp_nonpositive(load8_as_float(r + j + kLanes8) - max8);
    }
    if (j < vec_end) even += exp_nonpositive(load8_as_float(r + j) - max8);
    float total = tree_sum16(even, odd);
    if (vec_end < n) {
      float tail[kLanes8];
      for (int64_t l = 0; l < kLanes8; ++l) tail[l] = vec_end + l < n ? r[vec_end + l] : max;
      const f32x8 e = exp_nonpositive(load8_as_float(tail) - max8);
      for (int64_t l = 0; vec_end + l < n; ++l) total += e[l];
    }
    const f32x8 shift = f32x8{} + (max + std::log(total));
    for (j = 0; j < vec_end; j += kLanes8) {
      const f32x8 v = load8_as_float(r + j) - shift;
      std::memcpy(r + j, &v, sizeof v);
    }
    for (j = vec_end; j < n; ++j) r[j] -= shift[0];
  }
}

TORCHMT_VECTOR_KERNEL(void, log_softmax_rows_fp32, log_softmax_rows_body, (float* x, int64_t n, int64_t begin, int64_t end),
                      (x, n, begin, end))

}  // namespace

bool rotary_cpu_applies(const at::Tensor& x, const at::Tensor& sin_in, const at::Tensor& cos_in) {
  if (!x.defined() || x.dim() != 4 || !x.device().is_cpu() || !sin_in.defined() || !cos_in.defined()) return false;
  const auto dtype = x.scalar_type();
  if ((dtype != at::kFloat && dtype != at::kBFloat16) || sin_in.scalar_type() != dtype ||
      cos_in.scalar_type() != dtype || !sin_in.device().is_cpu() || !cos_in.device().is_cpu() || sin_in.dim() > 4 ||
      cos_in.dim() > 4 || x.size(3) % 2 != 0 || (x.stride(3) != 1 && x.size(3) > 1) || x.numel() == 0)
    return false;
  for (const auto* table : {&sin_in, &cos_in})  // right-aligned broadcast to x
    for (int64_t i = 1; i <= table->dim(); ++i)
      if (table->size(-i) != 1 && table->size(-i) != x.size(-i)) return false;
  if (sin_in.size(-1) != x.size(3) || cos_in.size(-1) != x.size(3)) return false;
  // The tables broadcast along the last dimension would need a stride-0 row.
  return x.size(3) == 1 || (cos_in.stride(-1) == 1 && sin_in.stride(-1) == 1);
}

namespace {

// rotary_cpu after its check (try_rotary_cpu has made it already).
at::Tensor rotate_checked(const at::Tensor& x, const at::Tensor& sin_in, const at::Tensor& cos_in, bool transposed) {
  RECORD_FUNCTION(transposed ? "torchmt::rotary_backward" : "torchmt::rotary", std::vector<c10::IValue>());
  auto cos = cos_in.expand(x.sizes());  // [B, H, T, d_k], strides 0 where broadcast
  auto sin = sin_in.expand(x.sizes());  // [B, H, T, d_k]
  auto out = at::empty_like(x);  // x's layout (a transposed view stays one)
  if (out.stride(3) != 1 && x.size(3) > 1) out = at::empty(x.sizes(), x.options());
  RotaryView v{};
  v.dim = x.size(3);
  v.transposed = transposed;
  for (int i = 0; i < 3; ++i) {
    v.sizes[i] = x.size(i);
    v.x_stride[i] = x.stride(i);
    v.out_stride[i] = out.stride(i);
    v.cos_stride[i] = cos.stride(i);
    v.sin_stride[i] = sin.stride(i);
  }
  const int64_t rows = v.sizes[0] * v.sizes[1] * v.sizes[2];
  const int64_t grain = std::max<int64_t>(1, 16384 / v.dim);  // fork only for ~16k values per thread
  if (x.scalar_type() == at::kFloat) {
    parallel_for(0, rows, grain, [&](int64_t b, int64_t e) {
      rotary_rows_fp32(x.data_ptr<float>(), cos.data_ptr<float>(), sin.data_ptr<float>(), out.data_ptr<float>(), v,
                       b, e);
    });
  } else {
    parallel_for(0, rows, grain, [&](int64_t b, int64_t e) {
      rotary_rows_bf16(bf16_bits(x), bf16_bits(cos), bf16_bits(sin), bf16_bits(out), v, b, e);
    });
  }
  return out;
}

}  // namespace

at::Tensor rotary_cpu(const at::Tensor& x, const at::Tensor& sin, const at::Tensor& cos, bool transposed) {
  TORCH_CHECK(rotary_cpu_applies(x, sin, cos), "rotary_cpu: tensors it does not take");
  return rotate_checked(x, sin, cos, transposed);
}

at::Tensor try_rotary_cpu(const at::Tensor& x, const at::Tensor& sin, const at::Tensor& cos) {
  if (!inference_on_cpu(x) || !rotary_cpu_applies(x, sin, cos)) return {};
  return rotate_checked(x, sin, cos, /*transposed=*/false);
}

std::pair<at::Tensor, at::Tensor> try_add_layer_norm_cpu(const at::Tensor& x, const at::Tensor& y,
                                                         const at::Tensor& weight, const at::Tensor& bias,
                                                         double eps) {
  if (!inference_on_cpu(x) || x.dim() == 0 || !y.defined() || y.sizes() != x.sizes() ||
      y.scalar_type() != x.scalar_type() || !y.device().is_cpu() || !x.is_contiguous() || !y.is_contiguous())
    return {};
  const int64_t dim = x.size(-1);
  for (const auto* p : {&weight, &bias})
    if (!p->defined() || p->scalar_type() != x.scalar_type() || !p->device().is_cpu() || p->dim() != 1 ||
        p->size(0) != dim || !p->is_contiguous())
      return {};
  if (dim == 0 || x.numel() == 0) return {};
  RECORD_FUNCTION("torchmt::add_layer_norm", std::vector<c10::IValue>());
  auto sum = at::empty_like(x, at::MemoryFormat::Contiguous);
  auto out = at::empty_like(x, at::MemoryFormat::Contiguous);
  const int64_t rows = x.numel() / dim;
  const int64_t grain = std::max<int64_t>(1, 16384 / dim);
  const auto e = static_cast<float>(eps);
  parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(static_cast<size_t>(dim));
    if (x.scalar_type() == at::kFloat)
      add_norm_rows_fp32(x.data_ptr<float>(), y.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
                         e, dim, begin, end, sum.data_ptr<float>(), out.data_ptr<float>(), scratch.data());
    else
      add_norm_rows_bf16(bf16_bits(x), bf16_bits(y), bf16_bits(weight), bf16_bits(bias), e, dim, begin, end,
                         bf16_bits(sum), bf16_bits(out), scratch.data());
  });
  return {sum, out};
}

bool try_log_softmax_in_place_cpu(at::Tensor& x) {
  if (!x.defined() || at::GradMode::is_enabled() || !x.device().is_cpu() || x.scalar_type() != at::kFloat ||
      x.dim() != 2 || !x.is_contiguous() || x.size(1) == 0 || x.requires_grad())
    return false;
  RECORD_FUNCTION("torchmt::log_softmax_in_place", std::vector<c10::IValue>());
  const int64_t rows = x.size(0), n = x.size(1);
  float* data = x.data_ptr<float>();
  parallel_for(0, rows, std::max<int64_t>(1, 65536 / n),
                   [&](int64_t begin, int64_t end) { log_softmax_rows_fp32(data, n, begin, end); });
  return true;
}

}  // namespace torchmt::kernels
