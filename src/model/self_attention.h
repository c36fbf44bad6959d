#pragma once
// The single-head self-attention of reference 000 (section 2.4) and 001 (section 4),
// `SelfAttention`: W_q, W_k, W_v of [embed_dim, embed_dim], d_k = embed_dim, no output
// projection; returns the output and the attention weights. It is the teaching form of
// MultiHeadAttention with one head and W_o the identity, and computes exactly that (tested;
// masks as masks.h). Not a model switch: a one-head model is `num_heads: 1`; this class is
// the documents' building block, for users and tests.
#include <tuple>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

namespace torchmt {

class SelfAttentionImpl : public torch::nn::Cloneable<SelfAttentionImpl> {
 public:
  explicit SelfAttentionImpl(int64_t embed_dim);
  void reset() override;
  // x [B, T, D] -> (output [B, T, D], weights [B, T, T]); mask broadcast to [B, T, T].
  std::tuple<torch::Tensor, torch::Tensor> forward(const torch::Tensor& x, const torch::Tensor& mask = {});

  int64_t embed_dim;
  torch::nn::Linear W_q{nullptr}, W_k{nullptr}, W_v{nullptr};
};
TORCH_MODULE(SelfAttention);

}  // namespace torchmt
