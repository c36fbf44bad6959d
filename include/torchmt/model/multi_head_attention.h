#pragma once
// Multi-head attention (paper §3.2.2), mirrors the reference `MultiHeadAttention`:
// projections W_q, W_k, W_v, W_o and dropout on the attention weights.
//
// Three paths compute the same function:
//  - fused: at::scaled_dot_product_attention (flash / memory-efficient kernels on CUDA),
//    used whenever the weights are not requested, except on CPU where it is slower (bf16,
//    or training with dropout) and on CUDA under a padding mask (see use_fused_kernel);
//  - explicit: softmax(QK^T / sqrt(d_k)) V, which also returns the weights (pictures);
//  - single query on the CPU in inference (a decoding step): one pass per head
//    (single_query_attention.h), ahead of both.
// Masks follow torchmt/model/masks.h (bool, true = may attend). A query whose keys are all
// masked attends to all of them instead of producing NaN.
#include <tuple>

#include <torch/nn/cloneable.h>
#include "torchmt/model/dropout.h"
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

namespace torchmt {

struct MultiHeadAttentionOptions {
  MultiHeadAttentionOptions(int64_t embed_dim, int64_t num_heads) : embed_dim_(embed_dim), num_heads_(num_heads) {}
  TORCH_ARG(int64_t, embed_dim);
  TORCH_ARG(int64_t, num_heads);
  TORCH_ARG(double, dropout) = 0.1;
};

// Which path forward() takes: kAuto chooses by device, dtype and mask (use_fused_kernel);
// the others force one, process-wide, for benchmarks that compare them.
enum class AttentionKernel { kAuto, kFused, kExplicit };
void set_attention_kernel(AttentionKernel kernel);
AttentionKernel attention_kernel();

class MultiHeadAttentionImpl : public torch::nn::Cloneable<MultiHeadAttentionImpl> {
 public:
  explicit MultiHeadAttentionImpl(const MultiHeadAttentionOptions& options);
  void reset() override;

  // query [B, Tq, D], key/value [B, Tk, D] -> [B, Tq, D]. `causal`: the mask is a causal
  // mask and'ed with right padding of the keys (a decoder's self-attention), so a fused
  // kernel may apply causality alone (is_causal, flash attention): padding that sits after
  // every real query is already hidden from it, and padded queries' outputs are never used.
  torch::Tensor forward(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                        const torch::Tensor& mask = {}, bool causal = false);
  // Explicit path; returns (output [B, Tq, D], weights [B, H, Tq, Tk]).
  std::tuple<torch::Tensor, torch::Tensor> forward_with_weights(const torch::Tensor& query, const torch::Tensor& key,
                                                                const torch::Tensor& value,
                                                                const torch::Tensor& mask = {});

  // Building blocks for incremental decoding (the cache holds projected heads).
  // x [B, T, D] -> [B, H, T, d_k] through the given projection.
  torch::Tensor split_heads(torch::nn::Linear& projection, const torch::Tensor& x) const;
  // q [B, H, Tq, d_k], k/v [B, H, Tk, d_k] -> [B, Tq, D] after W_o. `mask_sanitized`:
  // the caller already applied without_empty_rows (decoding reuses one source mask per step).
  torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       const torch::Tensor& mask, bool mask_sanitized = false, bool causal = false);

  MultiHeadAttentionOptions options;
  int64_t head_dim = 0;
  torch::nn::Linear W_q{nullptr}, W_k{nullptr}, W_v{nullptr}, W_o{nullptr};
  Dropout dropout{nullptr};

 private:
  torch::Tensor merge_heads(const torch::Tensor& x) const;
  bool use_fused_kernel(const torch::Tensor& q, bool padding_mask) const;
  // softmax(QK^T / sqrt(d_k)) V on heads -> [B, H, Tq, d_k]; stores the weights if asked.
  torch::Tensor attend_explicit(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& mask, torch::Tensor* weights_out, bool mask_sanitized);
};
TORCH_MODULE(MultiHeadAttention);

}  // namespace torchmt
