#include "model/add_layer_norm.h"

#include <torch/torch.h>

#include "../kernels/primitives.h"

namespace torchmt {
namespace {

class LayerNormFunction : public torch::autograd::Function<LayerNormFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, double eps) {
    auto [y, mean, rstd] = kernels::layer_norm_training_forward(x, weight, bias, eps);
    ctx->save_for_backward({x, weight, mean, rstd});
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto [grad_x, grad_weight, grad_bias] =
        kernels::layer_norm_training_backward(grads[0], saved[0], saved[2], saved[3], saved[1]);
    return {grad_x, grad_weight, grad_bias, at::Tensor()};
  }
};

}  // namespace

at::Tensor layer_norm(torch::nn::LayerNorm& norm, const at::Tensor& x) {
  const auto& options = norm->options;
  // Training mode with or without gradients (a checkpointed layer's first forward computes what
  // its recomputation does).
  if (norm->is_training() && options.normalized_shape().size() == 1 && options.elementwise_affine() &&
      kernels::layer_norm_training_applies(x, norm->weight, norm->bias)) {
    if (torch::GradMode::is_enabled() && (x.requires_grad() || norm->weight.requires_grad() || norm->bias.requires_grad()))
      return LayerNormFunction::apply(x, norm->weight, norm->bias, options.eps());
    return std::get<0>(kernels::layer_norm_training_forward(x, norm->weight, norm->bias, options.eps()));
  }
  return norm(x);
}

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
  auto out = layer_norm(norm, s);
  if (sum) *sum = std::move(s);
  return out;
}

at::Tensor add_layer_norm(torch::nn::LayerNorm& norm, const at::Tensor& x, const at::Tensor& y, Dropout& dropout,
                          at::Tensor* sum) {
  if (!dropout->is_training() || dropout->p == 0.0) return add_layer_norm(norm, x, y, sum);
  auto s = dropout->residual(x, y);
  auto out = layer_norm(norm, s);
  if (sum) *sum = std::move(s);
  return out;
}

}  // namespace torchmt
