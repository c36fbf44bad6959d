#include <algorithm>
#include <cmath>
#include <tuple>

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include "bf16_bits.h"
#include "primitives.h"
#include "vector.h"
#include "parallel.h"

namespace torchmt::kernels {
namespace {

// Rows [begin, end) of x [rows, dim]: y = (x - mean) * rstd * weight + bias in T, each row's mean
// and rstd in fp32, the moments of the offsets from the row's first value (offset_moments, as the
// inference kernel takes them).
template <typename T>
TORCHMT_VECTOR_INLINE void norm_rows(const T* x, const float* weight, const float* bias, float eps, int64_t dim,
                                     int64_t begin, int64_t end, T* y, float* mean_out, float* rstd_out,
                                     float* scratch) {
  const int64_t vec_end = dim - dim % kLanes;
  for (int64_t row = begin; row < end; ++row) {
    const T* xr = x + row * dim;
    const float pivot = load_as_float(xr);
    f32x16 lanes = splat(0.0f);
    for (int64_t j = 0; j < vec_end; j += kLanes) {
      const f32x16 s = load16_as_float(xr + j) - pivot;
      store16(scratch + j, s);
      lanes += s;
    }
    float total = tree_sum16(lanes);
    for (int64_t j = vec_end; j < dim; ++j) total += scratch[j] = load_as_float(xr + j) - pivot;
    float mean = 0.0f, rstd = 0.0f;  // the offsets' mean
    offset_moments(scratch, dim, total, eps, &mean, &rstd);
    mean_out[row] = pivot + mean;
    rstd_out[row] = rstd;
    T* yr = y + row * dim;
    for (int64_t j = 0; j < vec_end; j += kLanes)
      store16_from_float(yr + j, (load16(scratch + j) - mean) * rstd * load16(weight + j) + load16(bias + j));
    for (int64_t j = vec_end; j < dim; ++j)
      store_from_float(yr + j, (scratch[j] - mean) * rstd * weight[j] + bias[j]);
  }
}

TORCHMT_VECTOR_KERNEL(void, norm_rows_f32, norm_rows, (const float* x, const float* weight, const float* bias, float eps, int64_t dim, int64_t begin, int64_t end, float* y, float* mean, float* rstd, float* scratch),
                      (x, weight, bias, eps, dim, begin, end, y, mean, rstd, scratch))
TORCHMT_VECTOR_KERNEL(void, norm_rows_bf16, norm_rows, (const uint16_t* x, const float* weight, const float* bias, float eps, int64_t dim, int64_t begin, int64_t end, uint16_t* y, float* mean, float* rstd, float* scratch),
                      (x, weight, bias, eps, dim, begin, end, y, mean, rstd, scratch))

// Rows [begin, end) of the backward, with x_hat = (x - mean) * rstd and g = grad_y * weight:
// grad_x = rstd * (g - mean(g) - x_hat * mean(g * x_hat)), in T; grad_y * x_hat and grad_y added
// into the block's weight and bias sums (fp32 [dim] each).
template <typename T>
TORCHMT_VECTOR_INLINE void norm_backward_rows(const T* grad_y, const T* x, const float* mean, const float* rstd,
                                              const float* weight, int64_t dim, int64_t begin, int64_t end,
                                              T* grad_x, float* grad_weight, float* grad_bias) {
  const int64_t vec_end = dim - dim % kLanes;
  const float inv_dim = 1.0f / static_cast<float>(dim);
  for (int64_t row = begin; row < end; ++row) {
    const T* gr = grad_y + row * dim;
    const T* xr = x + row * dim;
    const float m = mean[row], r = rstd[row];
    f32x16 sum_g = splat(0.0f), sum_gx = splat(0.0f);
    for (int64_t j = 0; j < vec_end; j += kLanes) {
      const f32x16 dy = load16_as_float(gr + j);
      const f32x16 xhat = (load16_as_float(xr + j) - m) * r;
      const f32x16 g = dy * load16(weight + j);
      sum_g += g;
      sum_gx += g * xhat;
      store16(grad_weight + j, load16(grad_weight + j) + dy * xhat);
      store16(grad_bias + j, load16(grad_bias + j) + dy);
    }
    float sg = tree_sum16(sum_g), sgx = tree_sum16(sum_gx);
    for (int64_t j = vec_end; j < dim; ++j) {
      const float dy = load_as_float(gr + j);
      const float xhat = (load_as_float(xr + j) - m) * r;
      const float g = dy * weight[j];
      sg += g;
      sgx += g * xhat;
      grad_weight[j] += dy * xhat;
      grad_bias[j] += dy;
    }
    const float mg = sg * inv_dim, mgx = sgx * inv_dim;
    T* dx = grad_x + row * dim;
    for (int64_t j = 0; j < vec_end; j += kLanes) {
      const f32x16 xhat = (load16_as_float(xr + j) - m) * r;
      const f32x16 g = load16_as_float(gr + j) * load16(weight + j);
      store16_from_float(dx + j, (g - mg - xhat * mgx) * r);
    }
    for (int64_t j = vec_end; j < dim; ++j) {
      const float xhat = (load_as_float(xr + j) - m) * r;
      const float g = load_as_float(gr + j) * weight[j];
      store_from_float(dx + j, (g - mg - xhat * mgx) * r);
    }
  }
}

TORCHMT_VECTOR_KERNEL(void, norm_backward_rows_f32, norm_backward_rows, (const float* grad_y, const float* x, const float* mean, const float* rstd, const float* weight, int64_t dim, int64_t begin, int64_t end, float* grad_x, float* grad_weight, float* grad_bias),
                      (grad_y, x, mean, rstd, weight, dim, begin, end, grad_x, grad_weight, grad_bias))
TORCHMT_VECTOR_KERNEL(void, norm_backward_rows_bf16, norm_backward_rows, (const uint16_t* grad_y, const uint16_t* x, const float* mean, const float* rstd, const float* weight, int64_t dim, int64_t begin, int64_t end, uint16_t* grad_x, float* grad_weight, float* grad_bias),
                      (grad_y, x, mean, rstd, weight, dim, begin, end, grad_x, grad_weight, grad_bias))

}  // namespace

bool layer_norm_training_applies(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!x.defined() || x.dim() == 0 || !x.device().is_cpu() ||
      (x.scalar_type() != at::kFloat && x.scalar_type() != at::kBFloat16))
    return false;
  const int64_t dim = x.size(-1);
  for (const auto* p : {&weight, &bias})
    if (!p->defined() || p->scalar_type() != at::kFloat || !p->device().is_cpu() || p->dim() != 1 ||
        p->size(0) != dim)
      return false;
  return dim > 0;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_training_forward(const at::Tensor& x,
                                                                           const at::Tensor& weight,
                                                                           const at::Tensor& bias, double eps) {
  RECORD_FUNCTION("torchmt::layer_norm", std::vector<c10::IValue>{});
  TORCH_CHECK(layer_norm_training_applies(x, weight, bias), "layer_norm_training_forward: unsupported inputs");
  auto xc = x.contiguous();
  auto w = weight.contiguous(), b = bias.contiguous();
  auto y = at::empty_like(xc, at::MemoryFormat::Contiguous);
  const int64_t dim = xc.size(-1), rows = xc.numel() / dim;
  auto mean = at::empty({rows}, xc.options().dtype(at::kFloat));
  auto rstd = at::empty({rows}, xc.options().dtype(at::kFloat));
  const auto e = static_cast<float>(eps);
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / dim), [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(static_cast<size_t>(dim));
    if (xc.scalar_type() == at::kFloat)
      norm_rows_f32(xc.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), e, dim, begin, end,
                    y.data_ptr<float>(), mean.data_ptr<float>(), rstd.data_ptr<float>(), scratch.data());
    else
      norm_rows_bf16(bf16_bits(xc), w.data_ptr<float>(), b.data_ptr<float>(), e, dim, begin, end, bf16_bits(y),
                     mean.data_ptr<float>(), rstd.data_ptr<float>(), scratch.data());
  });
  return {y, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_training_backward(const at::Tensor& grad_y,
                                                                            const at::Tensor& x,
                                                                            const at::Tensor& mean,
                                                                            const at::Tensor& rstd,
                                                                            const at::Tensor& weight) {
  RECORD_FUNCTION("torchmt::layer_norm_backward", std::vector<c10::IValue>{});
  auto xc = x.contiguous();
  auto g = grad_y.to(xc.scalar_type()).contiguous();
  auto w = weight.contiguous();
  auto grad_x = at::empty_like(xc, at::MemoryFormat::Contiguous);
  const int64_t dim = xc.size(-1), rows = xc.numel() / dim;
  const int64_t blocks = row_sum_blocks(rows);
  auto partial = at::zeros({2, blocks, dim}, xc.options().dtype(at::kFloat));  // weight's and bias's sums per block
  float* pw = partial.data_ptr<float>();
  float* pb = pw + blocks * dim;
  for_each_row_sum_block(rows, [&](int64_t blk, int64_t r0, int64_t r1) {
    if (xc.scalar_type() == at::kFloat)
      norm_backward_rows_f32(g.data_ptr<float>(), xc.data_ptr<float>(), mean.data_ptr<float>(), rstd.data_ptr<float>(),
                             w.data_ptr<float>(), dim, r0, r1, grad_x.data_ptr<float>(), pw + blk * dim,
                             pb + blk * dim);
    else
      norm_backward_rows_bf16(bf16_bits(g), bf16_bits(xc), mean.data_ptr<float>(), rstd.data_ptr<float>(), w.data_ptr<float>(),
                              dim, r0, r1, bf16_bits(grad_x), pw + blk * dim, pb + blk * dim);
  });
  const auto sums = partial.sum(1);  // [2, dim]
  return {grad_x, sums[0], sums[1]};
}

}  // namespace torchmt::kernels
