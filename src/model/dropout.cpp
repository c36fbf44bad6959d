#include "torchmt/model/dropout.h"

#include <algorithm>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <type_traits>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include "../kernels/primitives.h"
#include "model/masks.h"

namespace torchmt {
namespace {

class HashedDropoutFunction : public torch::autograd::Function<HashedDropoutFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, double p, int64_t seed) {
    ctx->saved_data["p"] = p;
    ctx->saved_data["seed"] = seed;
    return kernels::hashed_dropout_mask(x, p, static_cast<uint64_t>(seed));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const double p = ctx->saved_data["p"].toDouble();
    const auto seed = static_cast<uint64_t>(ctx->saved_data["seed"].toInt());
    return {kernels::hashed_dropout_mask(grads[0], p, seed), at::Tensor(), at::Tensor()};
  }
};

class BiasReluDropoutFunction : public torch::autograd::Function<BiasReluDropoutFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& h, const at::Tensor& bias, double p,
                            int64_t seed) {
    auto y = kernels::bias_relu_dropout_forward(h, bias, p, static_cast<uint64_t>(seed));
    ctx->saved_data["p"] = p;
    ctx->save_for_backward({y});
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto y = ctx->get_saved_variables()[0];
    auto [grad_h, grad_bias] = kernels::bias_relu_dropout_backward(grads[0], y, ctx->saved_data["p"].toDouble());
    return {grad_h, grad_bias, at::Tensor(), at::Tensor()};
  }
};

class ResidualDropoutFunction : public torch::autograd::Function<ResidualDropoutFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& y, double p,
                            int64_t seed) {
    ctx->saved_data["p"] = p;
    ctx->saved_data["seed"] = seed;
    ctx->saved_data["y_dtype"] = static_cast<int64_t>(y.scalar_type());
    return kernels::residual_dropout_forward(x, y, p, static_cast<uint64_t>(seed));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto y_dtype = static_cast<at::ScalarType>(ctx->saved_data["y_dtype"].toInt());
    auto grad_y = kernels::hashed_dropout_mask_into(grads[0], ctx->saved_data["p"].toDouble(),
                                                    static_cast<uint64_t>(ctx->saved_data["seed"].toInt()), y_dtype);
    return {grads[0], grad_y, at::Tensor(), at::Tensor()};
  }
};

class AttentionSoftmaxDropoutFunction : public torch::autograd::Function<AttentionSoftmaxDropoutFunction> {
 public:
  // The mask as an optional: an undefined tensor cannot be one of apply()'s inputs.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& scores,
                            const c10::optional<at::Tensor>& mask, double scale, double p, int64_t seed) {
    auto [y, weights] = kernels::attention_softmax_dropout_forward(scores, mask.value_or(at::Tensor()), scale, p,
                                                                   static_cast<uint64_t>(seed));
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["p"] = p;
    ctx->saved_data["seed"] = seed;
    ctx->save_for_backward({y});
    return weights;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto y = ctx->get_saved_variables()[0];
    auto grad = kernels::attention_softmax_dropout_backward(grads[0], y, ctx->saved_data["scale"].toDouble(),
                                                            ctx->saved_data["p"].toDouble(),
                                                            static_cast<uint64_t>(ctx->saved_data["seed"].toInt()));
    return {grad, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

uint64_t draw_seed() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get<at::CPUGeneratorImpl>()->random64();
}

}  // namespace

torch::Tensor hashed_dropout(const torch::Tensor& x, double p, uint64_t seed) {
  if (!x.device().is_cpu()) throw std::invalid_argument("hashed_dropout runs on CPU tensors");
  if (p <= 0.0) return x;
  if (p >= 1.0) return x * 0;
  return HashedDropoutFunction::apply(x, p, static_cast<int64_t>(seed));
}

torch::Tensor bias_relu_dropout(const torch::Tensor& h, const torch::Tensor& bias, double p) {
  if (!kernels::fused_bias_relu_dropout_applies(h, bias, p)) {
    auto y = torch::relu(h + bias.to(h.scalar_type()));
    if (p <= 0.0) return y;
    return y.device().is_cpu() ? hashed_dropout(y, p, draw_seed()) : torch::dropout(y, p, /*train=*/true);
  }
  return BiasReluDropoutFunction::apply(h, bias, p, static_cast<int64_t>(draw_seed()));
}

DropoutImpl::DropoutImpl(double p_) : p(p_) {
  if (p < 0.0 || p > 1.0) throw std::invalid_argument("dropout probability must be in [0, 1]");
}

torch::Tensor DropoutImpl::residual(const torch::Tensor& x, const torch::Tensor& y) {
  if (!is_training() || p == 0.0) return x + y;
  if (!kernels::fused_residual_dropout_applies(x, y, p)) return x + forward(y);
  return ResidualDropoutFunction::apply(x, y, p, static_cast<int64_t>(draw_seed()));
}

torch::Tensor DropoutImpl::attention(const torch::Tensor& scores, const torch::Tensor& mask, double scale,
                                     bool mask_sanitized, torch::Tensor* softmax_out) {
  const double rate = is_training() ? p : 0.0;
  if (softmax_out == nullptr && is_training() && kernels::attention_softmax_dropout_applies(scores, mask, rate))
    return AttentionSoftmaxDropoutFunction::apply(scores, mask.defined() ? c10::optional<at::Tensor>(mask) : c10::nullopt,
                                                  scale, rate, rate > 0.0 ? static_cast<int64_t>(draw_seed()) : 0);
  auto scaled = scores * scale;  // [B, H, Tq, Tk]
  if (mask.defined())
    scaled = scaled.masked_fill((mask_sanitized ? mask : without_empty_rows(mask)).logical_not(),
                                -std::numeric_limits<float>::infinity());
  auto weights = torch::softmax(scaled, -1);
  if (softmax_out) *softmax_out = weights;
  return forward(weights);
}

torch::Tensor DropoutImpl::forward(const torch::Tensor& x) {
  if (!is_training() || p == 0.0) return x;
  if (!x.device().is_cpu()) return torch::dropout(x, p, /*train=*/true);
  return hashed_dropout(x, p, draw_seed());
}

}  // namespace torchmt
