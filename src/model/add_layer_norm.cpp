#include "model/add_layer_norm.h"

#include <torch/torch.h>

#include "../kernels/primitives.h"

namespace torchmt {

at::Tensor add_layer_norm(torch::nn::LayerNorm& norm, const at::Tensor& x, const at::Tensor& y, at::Tensor* sum) {
  const auto& options = norm->options;
  if (options.normalized_shape().size() == 1 && options.elementwise_affine()) {
    auto [s, out] = kernels::try_add_layer_norm_cpu(x, y, norm->weight, norm->bias, options.eps());
    if (out.defined()) {
      if (sum) *sum = std::move(s);
      return out;
    }
  }
  auto s = x + y;
  auto out = norm(s);
  if (sum) *sum = std::move(s);
  return out;
}

at::Tensor add_layer_norm(torch::nn::LayerNorm& norm, const at::Tensor& x, const at::Tensor& y, Dropout& dropout,
                          at::Tensor* sum) {
  if (!dropout->is_training() || dropout->p == 0.0) return add_layer_norm(norm, x, y, sum);
  auto s = dropout->residual(x, y);
  auto out = norm(s);
  if (sum) *sum = std::move(s);
  return out;
}

}  // namespace torchmt
