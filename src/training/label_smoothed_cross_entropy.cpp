#include "training/label_smoothed_cross_entropy.h"

#include <torch/torch.h>

#include <ATen/record_function.h>

#include "../kernels/primitives.h"

namespace torchmt {
namespace {

// The CPU path: the kernel's one pass per row (max, sum, sum of exp, gold logit, and the gradient
// written once in the logits' dtype) where ATen's composition (cast to fp32, log_softmax, gather,
// sum, their backward kernels and the zero-filled scatter) made six passes over fp32 [N, V]
// buffers, a large share of a CPU bf16 step with an 8k vocabulary (tools/bench/DECISIONS.md).
class FusedCrossEntropyFunction : public torch::autograd::Function<FusedCrossEntropyFunction> {
 public:
  // Returns {loss, nll}; the gradient is computed here and only scaled in backward.
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& logits,
                                                const at::Tensor& target, double smoothing, int64_t pad_id) {
    RECORD_FUNCTION("torchmt::fused_label_smoothed_cross_entropy", std::vector<c10::IValue>{});
    const bool want_grad = ctx != nullptr;
    const int64_t vocab = logits.size(-1);
    auto flat = logits.reshape({-1, vocab}).contiguous();  // [N, V]
    auto gold = target.reshape({-1}).to(at::kLong).contiguous();  // [N]
    const int64_t rows = flat.size(0);
    // The kernel indexes each row by its target: out-of-range ids must fail here, as gather would.
    TORCH_CHECK(rows == 0 || (gold.min().item<int64_t>() >= 0 && gold.max().item<int64_t>() < vocab),
                "label-smoothed cross-entropy: a target id is outside the vocabulary of ", vocab);
    auto loss_rows = at::empty({rows}, at::kDouble);
    auto nll_rows = at::empty({rows}, at::kDouble);
    at::Tensor grad = want_grad ? at::empty_like(flat) : at::Tensor();
    if (flat.scalar_type() == at::kBFloat16) {
      kernels::label_smoothed_cross_entropy_rows(
          reinterpret_cast<const uint16_t*>(flat.data_ptr<at::BFloat16>()), gold.data_ptr<int64_t>(), rows, vocab,
          smoothing, pad_id, loss_rows.data_ptr<double>(), nll_rows.data_ptr<double>(),
          want_grad ? reinterpret_cast<uint16_t*>(grad.data_ptr<at::BFloat16>()) : nullptr);
    } else {
      TORCH_CHECK(flat.scalar_type() == at::kFloat, "fused_label_smoothed_cross_entropy takes fp32 or bf16 logits");
      kernels::label_smoothed_cross_entropy_rows(flat.data_ptr<float>(), gold.data_ptr<int64_t>(), rows, vocab,
                                                 smoothing, pad_id, loss_rows.data_ptr<double>(),
                                                 nll_rows.data_ptr<double>(),
                                                 want_grad ? grad.data_ptr<float>() : nullptr);
    }
    if (want_grad) {
      ctx->save_for_backward({grad.view(logits.sizes())});
      ctx->saved_data["handed_over"] = false;
    }
    auto nll = nll_rows.sum().to(at::kFloat);
    if (want_grad) ctx->mark_non_differentiable({nll});
    return {loss_rows.sum().to(at::kFloat), nll};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto& scale = grads[0];
    if (!scale.defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    auto grad = ctx->get_saved_variables()[0];
    // The common case is one loss.backward() with a gradient of exactly 1: hand the buffer
    // over instead of copying it. A second backward (retain_graph) may find that buffer
    // accumulated into, so it never gets it again.
    if (scale.item<float>() == 1.0f && !ctx->saved_data["handed_over"].toBool()) {
      ctx->saved_data["handed_over"] = true;
      return {grad, at::Tensor(), at::Tensor(), at::Tensor()};
    }
    ctx->saved_data["handed_over"] = true;
    return {grad * scale.to(grad.scalar_type()), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

CriterionOutput fused_label_smoothed_cross_entropy(const at::Tensor& logits, const at::Tensor& target,
                                                   double smoothing, int64_t pad_id) {
  TORCH_CHECK(logits.device().is_cpu(), "fused_label_smoothed_cross_entropy runs on CPU tensors");
  const auto dtype = logits.scalar_type();
  at::Tensor scored = dtype == at::kFloat || dtype == at::kBFloat16 ? logits : logits.to(at::kFloat);
  CriterionOutput out;
  torch::autograd::variable_list parts;
  if (torch::GradMode::is_enabled() && scored.requires_grad()) {
    parts = FusedCrossEntropyFunction::apply(scored, target, smoothing, pad_id);
  } else {
    at::NoGradGuard no_grad;
    parts = FusedCrossEntropyFunction::forward(nullptr, scored.detach(), target, smoothing, pad_id);
  }
  out.loss = parts[0];
  out.nll = parts[1].detach();
  out.tokens = target.ne(pad_id).sum();
  return out;
}

}  // namespace

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

at::Tensor rdrop_symmetric_kl(const at::Tensor& logits, const at::Tensor& target, int64_t pad_id) {
  TORCH_CHECK(logits.dim() == 3 && logits.size(0) == 2 * target.size(0) && logits.size(1) == target.size(1),
              "rdrop_symmetric_kl: logits [2B, T, V] for a target [B, T]");
  auto halves = torch::log_softmax(logits.to(torch::kFloat), -1).chunk(2, 0);  // 2 x [B, T, V]
  const at::Tensor& p = halves[0];
  const at::Tensor& q = halves[1];
  // KL(p||q) + KL(q||p) = sum over the vocabulary of (p - q) * (log p - log q).
  auto per_position = ((p.exp() - q.exp()) * (p - q)).sum(-1);  // [B, T]
  return per_position.masked_fill(target.eq(pad_id), 0.0).sum();
}

}  // namespace torchmt
