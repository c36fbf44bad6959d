#pragma once
// Multi-head attention (paper §3.2.2), mirrors the reference `MultiHeadAttention`:
// projections W_q, W_k, W_v, W_o and dropout on the attention weights.
//
// With kv_heads < num_heads it is the reference's `GroupedQueryAttention` (002): keys and
// values have kv_heads heads (`num_groups` there), query head h reads K/V head
// h / (num_heads / kv_heads), and the projections carry that class's names, q_proj, k_proj,
// v_proj and o_proj (the document leaves the output projection out; o_proj is its usual name).
// The members W_q..W_o hold them either way: one implementation, two sets of state-dict names.
// Rotary positions (rotary.h) rotate the queries and keys when forward() is given tables.
//
// Three paths compute the same function:
//  - fused: at::scaled_dot_product_attention (flash / memory-efficient kernels on CUDA),
//    used whenever the weights are not requested, except on CPU where it is slower (bf16,
//    or training with dropout) and on CUDA under a padding mask (see use_fused_kernel);
//  - explicit: softmax(QK^T / sqrt(d_k)) V, which also returns the weights (pictures);
//  - single query on the CPU in inference (a decoding step): one pass per head
//    (src/kernels/primitives.h), ahead of both.
// Masks follow torchmt/model/masks.h (bool, true = may attend). A query whose keys are all
// masked attends to all of them instead of producing NaN.
#include <tuple>

#include "torchmt/model/rotary.h"

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
  TORCH_ARG(int64_t, kv_heads) = 0;  // 0 = num_heads
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
  // `rotary`: tables for the positions of query and key (self-attention), applied to both.
  torch::Tensor forward(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                        const torch::Tensor& mask = {}, bool causal = false, const RotaryTables& rotary = {});
  // Explicit path; returns (output [B, Tq, D], weights [B, H, Tq, Tk]).
  std::tuple<torch::Tensor, torch::Tensor> forward_with_weights(const torch::Tensor& query, const torch::Tensor& key,
                                                                const torch::Tensor& value,
                                                                const torch::Tensor& mask = {},
                                                                const RotaryTables& rotary = {});

  // Building blocks for incremental decoding (the cache holds projected heads).
  // x [B, T, D] -> [B, n, T, d_k] through the given projection (n = its outputs / d_k: H for
  // W_q, kv_heads for W_k and W_v).
  torch::Tensor split_heads(torch::nn::Linear& projection, const torch::Tensor& x) const;
  // q [B, H, Tq, d_k], k/v [B, G, Tk, d_k] (G = kv_heads) -> [B, Tq, D] after W_o; k/v (and the
  // mask) may have B / r rows, row b / r serving query row b (kv_cache.h). `mask_sanitized`:
  // the caller already applied without_empty_rows (decoding reuses one source mask per step).
  torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       const torch::Tensor& mask, bool mask_sanitized = false, bool causal = false);

  int64_t kv_heads() const { return options.kv_heads() > 0 ? options.kv_heads() : options.num_heads(); }
  bool grouped() const { return kv_heads() != options.num_heads(); }

  MultiHeadAttentionOptions options;
  int64_t head_dim = 0;
  torch::nn::Linear W_q{nullptr}, W_k{nullptr}, W_v{nullptr}, W_o{nullptr};
  Dropout dropout{nullptr};

 private:
  // y [B, T, n * d_k] -> [B, n, T, d_k]
  torch::Tensor to_heads(const torch::Tensor& projected) const;
  // The heads of Q, K and V from query, key and value (split_heads through W_q, W_k, W_v).
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> project(const torch::Tensor& query, const torch::Tensor& key,
                                                                  const torch::Tensor& value);
  torch::Tensor merge_heads(const torch::Tensor& x) const;
  bool use_fused_kernel(const torch::Tensor& q, bool padding_mask) const;
  // softmax(QK^T / sqrt(d_k)) V on heads -> [B, H, Tq, d_k]; stores the weights if asked.
  torch::Tensor attend_explicit(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& mask, torch::Tensor* weights_out, bool mask_sanitized);
};
TORCH_MODULE(MultiHeadAttention);

}  // namespace torchmt
