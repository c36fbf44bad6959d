#pragma once
// Label-smoothed cross-entropy (paper §5.4; fairseq's label_smoothed_cross_entropy):
// loss = (1 - eps) * nll + eps * mean over the vocabulary of -log p, padding ignored.
#include <ATen/core/Tensor.h>

namespace torchmt {

struct CriterionOutput {
  at::Tensor loss;  // sum over non-pad target tokens (what backward() is called on)
  at::Tensor nll;   // sum of -log p(gold), detached; exp(nll / tokens) is the perplexity
  at::Tensor tokens;  // int64 scalar on the logits' device: non-pad targets (no host sync)
};

class LabelSmoothedCrossEntropy {
 public:
  LabelSmoothedCrossEntropy(double smoothing, int64_t pad_id) : smoothing_(smoothing), pad_id_(pad_id) {}
  // logits [B, T, V] (any float dtype; computed in fp32), target [B, T].
  CriterionOutput operator()(const at::Tensor& logits, const at::Tensor& target) const;

 private:
  double smoothing_;
  int64_t pad_id_;
};

}  // namespace torchmt
