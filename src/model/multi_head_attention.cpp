#include "torchmt/model/multi_head_attention.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <torch/torch.h>

#include "model/linear.h"
#include "model/masks.h"
#include "model/self_attention.h"
#include "../kernels/primitives.h"

namespace torchmt {

namespace {
std::atomic<AttentionKernel> g_attention_kernel{AttentionKernel::kAuto};
}

void set_attention_kernel(AttentionKernel kernel) { g_attention_kernel.store(kernel); }
AttentionKernel attention_kernel() { return g_attention_kernel.load(); }

MultiHeadAttentionImpl::MultiHeadAttentionImpl(const MultiHeadAttentionOptions& options_) : options(options_) {
  reset();
}

void MultiHeadAttentionImpl::reset() {
  const int64_t d = options.embed_dim();
  if (d % options.num_heads() != 0) throw std::invalid_argument("embed_dim must be divisible by num_heads");
  head_dim = d / options.num_heads();
  if (options.kv_heads() < 0 || options.num_heads() % kv_heads() != 0)
    throw std::invalid_argument("kv_heads must divide num_heads");
  const int64_t kv = kv_heads() * head_dim;
  const bool g = grouped();  // GroupedQueryAttention's names (see the header)
  W_q = register_module(g ? "q_proj" : "W_q", make_linear(d, d));
  W_k = register_module(g ? "k_proj" : "W_k", make_linear(d, kv));
  W_v = register_module(g ? "v_proj" : "W_v", make_linear(d, kv));
  W_o = register_module(g ? "o_proj" : "W_o", make_linear(d, d));
  dropout = register_module("dropout", Dropout(options.dropout()));
}

torch::Tensor MultiHeadAttentionImpl::split_heads(torch::nn::Linear& projection, const torch::Tensor& x) const {
  return to_heads(apply_linear(projection, x));
}

torch::Tensor MultiHeadAttentionImpl::to_heads(const torch::Tensor& projected) const {
  const int64_t batch = projected.size(0);
  return projected.view({batch, projected.size(1), -1, head_dim})  // [B, T, n, d_k]
      .transpose(1, 2);                                            // [B, n, T, d_k]
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> MultiHeadAttentionImpl::project(const torch::Tensor& query,
                                                                                        const torch::Tensor& key,
                                                                                        const torch::Tensor& value) {
  // Training: projections of one input as one GEMM each way (larger products run nearer the
  // GEMM's peak). Inference keeps one prepared layer at a time.
  if (is_training() && query.is_same(key) && key.is_same(value)) {
    const auto qkv = apply_linears_together({&W_q, &W_k, &W_v}, query);  // [B, T, D], [B, T, G*d_k] x 2
    return {to_heads(qkv[0]), to_heads(qkv[1]), to_heads(qkv[2])};
  }
  if (is_training() && key.is_same(value)) {
    const auto kv = apply_linears_together({&W_k, &W_v}, key);  // [B, Tk, G*d_k] x 2
    return {split_heads(W_q, query), to_heads(kv[0]), to_heads(kv[1])};
  }
  return {split_heads(W_q, query), split_heads(W_k, key), split_heads(W_v, value)};
}

torch::Tensor MultiHeadAttentionImpl::merge_heads(const torch::Tensor& x) const {
  const int64_t batch = x.size(0);
  return x.transpose(1, 2)                              // [B, T, H, d_k]
      .contiguous()
      .view({batch, -1, options.embed_dim()});          // [B, T, D]
}

bool MultiHeadAttentionImpl::use_fused_kernel(const torch::Tensor& q, bool padding_mask) const {
  if (attention_kernel() != AttentionKernel::kAuto) return attention_kernel() == AttentionKernel::kFused;
  // On CUDA, flash attention where no padding mask is needed (decoder self-attention through
  // `causal`, decoding steps). Under a padding mask SDPA falls back to the memory-efficient
  // kernel, which trains far slower than the explicit matmuls in bf16 (tools/bench/DECISIONS.md).
  if (q.is_cuda()) return !padding_mask;
  // On CPU the fused kernel is only the faster choice in fp32 without dropout: with dropout it
  // is much slower than the explicit path in training, and under bf16 autocast the explicit
  // bf16 matmuls win.
  return q.scalar_type() == torch::kFloat && !(is_training() && options.dropout() > 0.0);
}

torch::Tensor MultiHeadAttentionImpl::attend_explicit(const torch::Tensor& q, const torch::Tensor& k,
                                                      const torch::Tensor& v, const torch::Tensor& mask,
                                                      torch::Tensor* weights_out, bool mask_sanitized) {
  const int64_t batch = q.size(0), heads = q.size(1), tq = q.size(2), groups = k.size(1), tk = k.size(2);
  const int64_t per_group = heads / groups;
  // Grouped heads broadcast over their K/V head instead of copying it per query head.
  auto scores = per_group == 1
                    ? torch::matmul(q, k.transpose(-2, -1))  // [B, H, Tq, Tk]
                    : torch::matmul(q.reshape({batch, groups, per_group * tq, head_dim}),  // [B, G, H/G*Tq, d_k]
                                    k.transpose(-2, -1))
                          .view({batch, heads, tq, tk});  // [B, H, Tq, Tk]
  auto weights = dropout->attention(scores, mask, 1.0 / std::sqrt(static_cast<double>(head_dim)), mask_sanitized,
                                    weights_out);  // [B, H, Tq, Tk]
  if (per_group == 1) return torch::matmul(weights, v);  // [B, H, Tq, d_k]
  return torch::matmul(weights.view({batch, groups, per_group * tq, tk}), v)  // [B, G, H/G*Tq, d_k]
      .view({batch, heads, tq, head_dim});                                     // [B, H, Tq, d_k]
}

torch::Tensor MultiHeadAttentionImpl::attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                             const torch::Tensor& mask, bool mask_sanitized, bool causal) {
  // Inference on the CPU: the kernel layer's rows, unless a benchmark forces an ATen path. Not in
  // training mode: no attention dropout there, and a checkpointed layer's forward (no gradients)
  // must compute what its recomputation with gradients does.
  if (attention_kernel() == AttentionKernel::kAuto && !is_training())
    if (auto merged = kernels::try_attention_rows_cpu(q, k, v, mask); merged.defined())  // [B, Tq, D]
      return apply_linear(W_o, merged);
  if (k.size(0) != q.size(0)) {
    // K/V (and mask) rows shared by q.size(0) / k.size(0) consecutive query rows (the beams
    // of a sentence, kv_cache.h): the other paths take one row each.
    const int64_t r = q.size(0) / k.size(0);
    const auto m = mask.defined() && mask.size(0) > 1 ? mask.repeat_interleave(r, 0) : mask;
    return attend(q, k.repeat_interleave(r, 0), v.repeat_interleave(r, 0), m, mask_sanitized, causal);
  }
  const bool causal_alone = causal && q.is_cuda() && q.size(2) == k.size(2);
  if (!use_fused_kernel(q, mask.defined() && !causal_alone))
    return apply_linear(W_o, merge_heads(attend_explicit(q, k, v, mask, nullptr, mask_sanitized)));
  c10::optional<torch::Tensor> attn_mask;
  if (mask.defined() && !causal_alone) attn_mask = mask_sanitized ? mask : without_empty_rows(mask);
  const double p = is_training() ? options.dropout() : 0.0;
  // LibTorch before 2.5 has no enable_gqa: K/V heads repeated for the fused kernel.
  const int64_t per_group = q.size(1) / k.size(1);
  const auto kf = per_group > 1 ? k.repeat_interleave(per_group, 1) : k;  // [B, H, Tk, d_k]
  const auto vf = per_group > 1 ? v.repeat_interleave(per_group, 1) : v;  // [B, H, Tk, d_k]
  auto out = at::scaled_dot_product_attention(q, kf, vf, attn_mask, p, causal_alone);  // [B, H, Tq, d_k]
  return apply_linear(W_o, merge_heads(out));
}

torch::Tensor MultiHeadAttentionImpl::forward(const torch::Tensor& query, const torch::Tensor& key,
                                              const torch::Tensor& value, const torch::Tensor& mask, bool causal,
                                              const RotaryTables& rotary) {
  auto [q, k, v] = project(query, key, value);  // [B, H, Tq, d_k], [B, G, Tk, d_k] x 2
  if (rotary.defined()) std::tie(q, k) = apply_rotary_pos_emb(q, k, rotary.sin, rotary.cos);
  return attend(q, k, v, mask, /*mask_sanitized=*/false, causal);
}

std::tuple<torch::Tensor, torch::Tensor> MultiHeadAttentionImpl::forward_with_weights(const torch::Tensor& query,
                                                                                      const torch::Tensor& key,
                                                                                      const torch::Tensor& value,
                                                                                      const torch::Tensor& mask,
                                                                                      const RotaryTables& rotary) {
  torch::Tensor weights;
  auto [q, k, v] = project(query, key, value);  // [B, H, Tq, d_k], [B, G, Tk, d_k] x 2
  if (rotary.defined()) std::tie(q, k) = apply_rotary_pos_emb(q, k, rotary.sin, rotary.cos);
  auto out = attend_explicit(q, k, v, mask, &weights, /*mask_sanitized=*/false);
  return {apply_linear(W_o, merge_heads(out)), weights};
}

SelfAttentionImpl::SelfAttentionImpl(int64_t embed_dim_) : embed_dim(embed_dim_) { reset(); }

void SelfAttentionImpl::reset() {
  W_q = register_module("W_q", make_linear(embed_dim, embed_dim));
  W_k = register_module("W_k", make_linear(embed_dim, embed_dim));
  W_v = register_module("W_v", make_linear(embed_dim, embed_dim));
}

std::tuple<torch::Tensor, torch::Tensor> SelfAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& mask) {
  // One head of width D: softmax(Q K^T / sqrt(D)) V, as MultiHeadAttention's explicit path.
  auto q = apply_linear(W_q, x), k = apply_linear(W_k, x), v = apply_linear(W_v, x);  // [B, T, D]
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(embed_dim));  // [B, T, T]
  if (mask.defined())
    scores = scores.masked_fill(without_empty_rows(mask).logical_not(), -std::numeric_limits<float>::infinity());
  auto weights = torch::softmax(scores, -1);
  return {torch::matmul(weights, v), weights};
}

}  // namespace torchmt
