#pragma once
// Adam (Kingma & Ba) with the paper's betas, stepping every parameter in one fused kernel
// call (`_fused_adam_`, LibTorch >= 2.4, CPU and CUDA) or in multi-tensor `_foreach_` ops
// (older LibTorch) instead of a per-parameter loop. The state is plain tensors so that a
// checkpoint stores and restores it exactly.
#include <vector>

#include <ATen/core/Tensor.h>

#include "io/checkpoint.h"  // OptimizerState

namespace torchmt {

struct AdamOptions {
  double beta1 = 0.9;
  double beta2 = 0.98;
  double eps = 1e-9;
  double weight_decay = 0.0;
};

class AdamOptimizer {
 public:
  // `params` must be distinct tensors (tied weights listed once: see unique_parameters).
  AdamOptimizer(std::vector<at::Tensor> params, AdamOptions options);

  // Uses each parameter's .grad(), times `grad_factor` (optional, a float scalar on the
  // parameters' device: the gradients are left scaled by it). `found_inf` (optional, likewise):
  // where it is non-zero the update and the step count are left unchanged, decided on the
  // device, so the caller need not wait for the gradients to be checked.
  void step(double lr, const at::Tensor& found_inf = {}, const at::Tensor& grad_factor = {});
  // Drops every .grad: a parameter no later backward reaches is then skipped by step(), as
  // torch.optim does after zero_grad(set_to_none=True).
  void zero_grad();

  const std::vector<at::Tensor>& params() const { return params_; }
  // State for checkpoints: exp_avg, exp_avg_sq, step, one entry per parameter each.
  OptimizerState& state() { return state_; }
  std::vector<at::Tensor>& exp_avg() { return state_.exp_avg; }
  std::vector<at::Tensor>& exp_avg_sq() { return state_.exp_avg_sq; }
  std::vector<at::Tensor>& steps() { return state_.steps; }

 private:
  std::vector<at::Tensor> params_;
  OptimizerState state_;
  AdamOptions options_;
};

}  // namespace torchmt
