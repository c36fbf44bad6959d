#include "training/training_step.h"

#include <cmath>
#include <stdexcept>

#include <torch/torch.h>

#include "torchmt/data/special_ids.h"
#include "training/gradient_reducer.h"
#include "training/process_group.h"
#include "torchmt/util/device.h"
#include "kernels/cpu_isa.h"
#include "kernels/primitives.h"
#include "util/heap.h"

namespace torchmt {

TrainingStep::TrainingStep(Transformer model, AdamOptimizer& optimizer, LabelSmoothedCrossEntropy criterion,
                           c10::Device device, c10::ScalarType dtype, double clip_norm)
    : model_(std::move(model)),
      optimizer_(optimizer),
      criterion_(criterion),
      vocabulary_pad_id_(criterion.pad_id()),
      device_(device),
      dtype_(dtype),
      clip_norm_(clip_norm) {
  check_training_dtype(dtype, device);
  // A state that holds a scale already (the trainer's, restored by a resume) keeps it.
  if (dtype == c10::ScalarType::Half && !optimizer_.state().loss_scale.defined())
    start_loss_scaling(optimizer_.state(), device);
}

void start_loss_scaling(OptimizerState& state, c10::Device device, double initial_scale) {
  state.loss_scale = torch::full({}, initial_scale, torch::TensorOptions().dtype(torch::kFloat).device(device));
  state.growth_tracker = torch::zeros({}, torch::TensorOptions().dtype(torch::kInt).device(device));
}

void TrainingStep::set_output_columns(const at::Tensor& open) {
  TORCH_CHECK(open.dim() == 1 && open.scalar_type() == torch::kBool, "set_output_columns takes a [V] bool tensor");
  columns_ = column_of_ = at::Tensor();
  const int64_t pad = vocabulary_pad_id_;
  if (open.all().item<bool>()) {
    criterion_ = LabelSmoothedCrossEntropy(criterion_.smoothing(), pad);
    return;
  }
  TORCH_CHECK(open[pad].item<bool>(), "set_output_columns: the padding column must stay open");
  const at::Tensor columns = open.nonzero().flatten();  // [C] ascending
  const int64_t pad_column = open.narrow(0, 0, pad).sum().item<int64_t>();
  // A closed id (none in targets the columns were chosen from) would count as padding.
  at::Tensor column_of = torch::full({open.size(0)}, pad_column, torch::kLong);
  column_of.index_put_({columns}, torch::arange(columns.size(0), torch::kLong));
  criterion_ = LabelSmoothedCrossEntropy(criterion_.smoothing(), pad_column);
  columns_ = columns.to(device_);
  column_of_ = column_of.to(device_);
}

void TrainingStep::set_loss_scaling(double initial_scale, int64_t growth_interval) {
  if (dtype_ != c10::ScalarType::Half) return;
  start_loss_scaling(optimizer_.state(), device_, initial_scale);
  growth_interval_ = growth_interval;
}

double TrainingStep::loss_scale() const {
  const auto& scale = optimizer_.state().loss_scale;
  return dtype_ == c10::ScalarType::Half && scale.defined() ? scale.item<double>() : 1.0;
}

StepResult TrainingStep::run(const std::vector<Batch>& batches, double lr) {
  model_->train();
  // fp16: the loss scale (a handle: _amp_update_scale_ below updates the state's tensor).
  at::Tensor scale = dtype_ == c10::ScalarType::Half ? optimizer_.state().loss_scale : at::Tensor();
  at::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().device(device_));
  StepResult result;
  const bool rdrop = rdrop_alpha_ > 0;
  for (size_t i = 0; i < batches.size(); ++i) {
    const Batch& batch = batches[i];
    if (reducer_ != nullptr && i + 1 == batches.size()) reducer_->arm();
    at::Tensor logits;
    const at::Tensor src = rdrop ? torch::cat({batch.src, batch.src}) : batch.src;            // [B', S]
    const at::Tensor tgt_in = rdrop ? torch::cat({batch.tgt_in, batch.tgt_in}) : batch.tgt_in;  // [B', T]
    {
      AutocastGuard autocast(device_, dtype_);
      logits = columns_.defined() ? model_->forward_columns(src, tgt_in, columns_)  // [B', T, C]
                                  : model_->forward(src, tgt_in);                   // [B', T, V]
    }
    // The targets as the logits' columns.
    const at::Tensor gold = columns_.defined() ? column_of_.index_select(0, batch.tgt_out.flatten()).view_as(batch.tgt_out)
                                               : batch.tgt_out;  // [B, T]
    auto out = criterion_(logits, rdrop ? torch::cat({gold, gold}) : gold);
    // The translation loss of one copy of the batch: under R-Drop the two copies' mean.
    at::Tensor loss = rdrop ? out.loss * 0.5 : out.loss;
    at::Tensor objective = loss;
    if (rdrop) objective = objective + rdrop_symmetric_kl(logits, gold, criterion_.pad_id()) * (rdrop_alpha_ / 4);
    at::Tensor aux = moe_aux_coefficient_ > 0 ? model_->moe_aux_loss() : at::Tensor();
    if (aux.defined()) objective = objective + aux * (moe_aux_coefficient_ * static_cast<double>(batch.tgt_tokens));
    (scale.defined() ? objective * scale : objective).backward();
    loss_sum += loss.detach();
    result.tokens += batch.tgt_tokens;
  }
  torch::NoGradGuard no_grad;
  if (reducer_ != nullptr) reducer_->finish();
  if (group_ != nullptr) {
    // [loss, tokens] summed over the ranks (doubles: token counts stay exact).
    at::Tensor totals = torch::stack({loss_sum.to(torch::kCPU, torch::kDouble),
                                      torch::scalar_tensor(static_cast<double>(result.tokens), torch::kDouble)});
    group_->all_reduce_sum(totals, "all-reduce of the loss and target tokens");
    loss_sum = totals[0].to(loss_sum.device(), loss_sum.scalar_type());
    result.tokens = static_cast<int64_t>(totals[1].item<double>());
  }
  std::vector<at::Tensor> grads;
  for (const auto& p : optimizer_.params())
    if (p.grad().defined()) grads.push_back(p.grad());
  // Gradients of the summed loss, normalised per target token over the whole update, and
  // clipped to clip_norm, by a factor computed on the device (no host sync; the same arithmetic
  // as torch.nn.utils.clip_grad_norm_ after a division by the tokens) that the optimizer applies
  // as it reads them. Under fp16 the gradients are the scaled loss's: the factor also divides by
  // the scale.
  const double per_token = 1.0 / static_cast<double>(std::max<int64_t>(1, result.tokens));
  at::Tensor unscale = torch::full({}, per_token, loss_sum.options());
  if (scale.defined()) unscale = unscale / scale;
  at::Tensor norm = grads.empty() ? torch::zeros({}, loss_sum.options())
                    : kernels::sum_of_squares_applies(grads)
                        ? kernels::sum_of_squares(grads).sqrt() * unscale
                        : at::linalg_vector_norm(at::stack(at::_foreach_norm(grads, 2)), 2) * unscale;
  at::Tensor factor = unscale.clone();
  if (clip_norm_ > 0) factor = factor * (clip_norm_ / (norm + 1e-6)).clamp_max(1.0);
  // A non-finite loss or gradient skips the update on the device (found_inf).
  at::Tensor found_inf = (loss_sum.isfinite() & norm.isfinite()).logical_not().to(torch::kFloat);
  optimizer_.step(lr, found_inf, factor);
  optimizer_.zero_grad();
  if (scale.defined())
    at::_amp_update_scale_(scale, optimizer_.state().growth_tracker, found_inf, 2.0, 0.5, growth_interval_);
  result.pending = torch::stack({loss_sum.to(torch::kFloat), norm.to(torch::kFloat)});  // [2]
  if (result.pending.is_cpu()) result.wait();  // nothing to overlap on the CPU
  return result;
}

void StepResult::wait() {
  if (!pending.defined()) return;
  const at::Tensor host = pending.to(torch::kCPU, torch::kDouble);  // the update's one sync
  loss = host[0].item<double>();
  grad_norm = host[1].item<double>();
  applied = std::isfinite(loss) && std::isfinite(grad_norm);
  pending = at::Tensor();
}

void use_training_process_policy() {
  use_cpu_tensor_pool(kTrainingTensorPoolCacheBytes);
  kernels::size_onednn_primitive_cache(kernels::kTrainingOnednnPrimitives);
}

double evaluate_nll(Transformer& model, const std::vector<Batch>& batches, c10::Device device, c10::ScalarType dtype) {
  const bool was_training = model->is_training();
  model->eval();
  torch::NoGradGuard no_grad;
  AutocastGuard autocast(device, dtype);
  LabelSmoothedCrossEntropy nll_only(0.0, model->config().pad_id);
  double nll = 0;
  int64_t tokens = 0;
  for (const Batch& b : batches) {
    auto out = nll_only(model->forward(b.src, b.tgt_in), b.tgt_out);
    nll += out.nll.item<double>();
    tokens += b.tgt_tokens;
  }
  if (was_training) model->train();
  return tokens > 0 ? nll / static_cast<double>(tokens) : 0.0;
}

}  // namespace torchmt
