#include "torchmt/training/training_step.h"

#include <cmath>

#include <torch/torch.h>

#include "torchmt/data/special_ids.h"
#include "torchmt/util/device.h"

namespace torchmt {

TrainingStep::TrainingStep(Transformer model, AdamOptimizer& optimizer, LabelSmoothedCrossEntropy criterion,
                           c10::Device device, c10::ScalarType dtype, double clip_norm)
    : model_(std::move(model)),
      optimizer_(optimizer),
      criterion_(criterion),
      device_(device),
      dtype_(dtype),
      clip_norm_(clip_norm) {}

StepResult TrainingStep::run(const std::vector<Batch>& batches, double lr) {
  model_->train();
  at::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().device(device_));
  StepResult result;
  for (const Batch& batch : batches) {
    at::Tensor logits;
    {
      AutocastGuard autocast(device_, dtype_);
      logits = model_->forward(batch.src, batch.tgt_in);  // [B, T, V]
    }
    auto out = criterion_(logits, batch.tgt_out);
    out.loss.backward();
    loss_sum += out.loss.detach();
    result.tokens += batch.tgt_tokens;
  }
  torch::NoGradGuard no_grad;
  const auto& params = optimizer_.params();
  std::vector<at::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  // Gradients of the summed loss, normalised per target token over the whole update.
  at::_foreach_mul_(grads, 1.0 / static_cast<double>(std::max<int64_t>(1, result.tokens)));
  // One host sync per update: the norm (and the loss) decide whether to apply it.
  result.grad_norm = torch::nn::utils::clip_grad_norm_(params, clip_norm_ > 0 ? clip_norm_ : 1e30);
  result.loss = loss_sum.item<double>();
  result.applied = std::isfinite(result.loss) && std::isfinite(result.grad_norm);
  if (result.applied) optimizer_.step(lr);
  optimizer_.zero_grad();
  return result;
}

double evaluate_nll(Transformer& model, const std::vector<Batch>& batches, c10::Device device, c10::ScalarType dtype) {
  const bool was_training = model->is_training();
  model->eval();
  torch::NoGradGuard no_grad;
  AutocastGuard autocast(device, dtype);
  LabelSmoothedCrossEntropy nll_only(0.0, kPadId);
  double nll = 0;
  int64_t tokens = 0;
  for (const Batch& b : batches) {
    auto out = nll_only(model->forward(b.src, b.tgt_in), b.tgt_out);
    nll += out.nll.item<double>();
    tokens += out.tokens;
  }
  if (was_training) model->train();
  return tokens > 0 ? nll / static_cast<double>(tokens) : 0.0;
}

}  // namespace torchmt
