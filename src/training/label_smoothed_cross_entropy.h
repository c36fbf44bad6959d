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
  int64_t pad_id() const { return pad_id_; }
  double smoothing() const { return smoothing_; }

 private:
  double smoothing_;
  int64_t pad_id_;
};

// R-Drop (Liang et al., 2021): the same batch twice in one forward, under two dropout masks;
// `logits` [2B, T, V] holds the two copies' outputs, first half p, second half q. Returns
// KL(p||q) + KL(q||p) summed over the non-pad positions of `target` [B, T] (fp32 scalar, with
// gradients into both halves).
at::Tensor rdrop_symmetric_kl(const at::Tensor& logits, const at::Tensor& target, int64_t pad_id);

}  // namespace torchmt
