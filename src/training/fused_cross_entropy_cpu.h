#pragma once
// CPU kernel of LabelSmoothedCrossEntropy (private to src/training).
#include <ATen/core/Tensor.h>

#include "torchmt/training/label_smoothed_cross_entropy.h"

namespace torchmt {

// One pass per row over logits [N, V] (fp32 or bf16, CPU): max, sum, sum of exp, gold
// logit, and, when a gradient is wanted, d loss / d logits = softmax - (1 - eps) onehot - eps / V
// written once in the logits' dtype. ATen's composition (cast to fp32, log_softmax, gather,
// sum, then their backward kernels and the zero-filled scatter) makes six passes over
// fp32 [N, V] buffers, a large share of a CPU bf16 step with an 8k vocabulary
// (tools/bench/DECISIONS.md).
// Returns CriterionOutput: loss [] fp32 (differentiable w.r.t. the logits when they require
// grad), nll [] fp32, the number of non-pad targets.
CriterionOutput fused_label_smoothed_cross_entropy(const at::Tensor& logits, const at::Tensor& target,
                                                   double smoothing, int64_t pad_id);

}  // namespace torchmt
