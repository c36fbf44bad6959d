#include "training/adam_optimizer.h"

#include <cmath>

#include <torch/torch.h>
#include <torch/version.h>

#define TORCHMT_HAS_FUSED_ADAM (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))

namespace torchmt {

AdamOptimizer::AdamOptimizer(std::vector<at::Tensor> params, AdamOptions options)
    : params_(std::move(params)), options_(options) {
  for (const auto& p : params_) {
    state_.exp_avg.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    state_.exp_avg_sq.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    state_.steps.push_back(torch::zeros({}, p.options().dtype(torch::kFloat)));
  }
}

void AdamOptimizer::zero_grad() {
  // Dropped, not zeroed (torch.optim's set_to_none): the next backward's first gradient becomes
  // .grad as it is, where zeros would cost a fill and an add per parameter.
  for (auto& p : params_) p.mutable_grad() = at::Tensor();
}

void AdamOptimizer::step(double lr, const at::Tensor& found_inf, const at::Tensor& grad_factor) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> params, grads, m, v, steps;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].grad().defined()) continue;
    params.push_back(params_[i]);
    grads.push_back(params_[i].grad());
    m.push_back(state_.exp_avg[i]);
    v.push_back(state_.exp_avg_sq[i]);
    steps.push_back(state_.steps[i]);
  }
  if (params.empty()) return;
#if TORCHMT_HAS_FUSED_ADAM
  at::_foreach_add_(steps, 1.0);  // the kernels read the already-incremented step
  // The kernel divides each gradient by grad_scale as it reads it (and stores the result): the
  // factor's multiply without a pass of its own.
  at::_fused_adam_(params, grads, m, v, /*max_exp_avg_sqs=*/{}, steps, lr, options_.beta1, options_.beta2,
                   options_.weight_decay, options_.eps, /*amsgrad=*/false, /*maximize=*/false,
                   grad_factor.defined() ? c10::optional<at::Tensor>(grad_factor.reciprocal()) : c10::nullopt,
                   found_inf.defined() ? c10::optional<at::Tensor>(found_inf) : c10::nullopt);
  // The kernel skipped a non-finite update: take its step count back as well (as torch.optim does).
  if (found_inf.defined()) at::_foreach_sub_(steps, std::vector<at::Tensor>(steps.size(), found_inf));
#else
  if (grad_factor.defined()) at::_foreach_mul_(grads, grad_factor);
  if (found_inf.defined() && found_inf.item<double>() != 0.0) return;  // host check: no fused kernel here
  at::_foreach_add_(steps, 1.0);
  // Multi-tensor fallback with the same arithmetic as torch.optim.Adam(foreach=True).
  const double step = steps[0].item<double>();
  if (options_.weight_decay != 0.0) grads = at::_foreach_add(grads, params, options_.weight_decay);
  at::_foreach_lerp_(m, grads, 1.0 - options_.beta1);
  at::_foreach_mul_(v, options_.beta2);
  at::_foreach_addcmul_(v, grads, grads, 1.0 - options_.beta2);
  const double bias1 = 1.0 - std::pow(options_.beta1, step);
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(options_.beta2, step));
  auto denom = at::_foreach_sqrt(v);
  at::_foreach_div_(denom, bias2_sqrt);
  at::_foreach_add_(denom, options_.eps);
  at::_foreach_addcdiv_(params, m, denom, -lr / bias1);
#endif
}

}  // namespace torchmt
