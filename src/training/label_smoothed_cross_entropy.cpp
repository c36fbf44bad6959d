#include "torchmt/training/label_smoothed_cross_entropy.h"

#include <torch/torch.h>

#include "fused_cross_entropy_cpu.h"

namespace torchmt {

CriterionOutput LabelSmoothedCrossEntropy::operator()(const at::Tensor& logits, const at::Tensor& target) const {
  if (logits.device().is_cpu()) return fused_label_smoothed_cross_entropy(logits, target, smoothing_, pad_id_);
  CriterionOutput out;
  // Elsewhere (CUDA) ATen's kernels are fast enough; the same formula in tensor ops.
  const int64_t vocab = logits.size(-1);
  auto lprobs = torch::log_softmax(logits.to(torch::kFloat), -1).view({-1, vocab});  // [B*T, V]
  auto flat_target = target.reshape({-1, 1});                                          // [B*T, 1]
  auto keep = flat_target.ne(pad_id_);                                                 // [B*T, 1]
  auto nll = -lprobs.gather(1, flat_target).masked_fill(keep.logical_not(), 0.0).sum();
  auto smooth = -lprobs.sum(-1, /*keepdim=*/true).masked_fill(keep.logical_not(), 0.0).sum();
  out.loss = (1.0 - smoothing_) * nll + (smoothing_ / static_cast<double>(vocab)) * smooth;
  out.nll = nll.detach();
  out.tokens = keep.sum();
  return out;
}

}  // namespace torchmt
