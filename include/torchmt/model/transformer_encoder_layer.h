#pragma once
// One encoder layer (paper §3.1, post-norm), mirrors the reference `TransformerEncoderLayer`:
// self_attn, ffn, norm1, norm2 and a dropout on each sub-layer output.
#include <string>

#include <torch/nn/cloneable.h>
#include "torchmt/model/dropout.h"
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "torchmt/model/feed_forward.h"
#include "torchmt/model/multi_head_attention.h"

namespace torchmt {

struct TransformerLayerOptions {
  TransformerLayerOptions(int64_t embed_dim, int64_t num_heads, int64_t ff_dim)
      : embed_dim_(embed_dim), num_heads_(num_heads), ff_dim_(ff_dim) {}
  TORCH_ARG(int64_t, embed_dim);
  TORCH_ARG(int64_t, num_heads);
  TORCH_ARG(int64_t, ff_dim);
  TORCH_ARG(double, dropout) = 0.1;
  TORCH_ARG(Activation, activation) = Activation::kReLU;
};

class TransformerEncoderLayerImpl : public torch::nn::Cloneable<TransformerEncoderLayerImpl> {
 public:
  explicit TransformerEncoderLayerImpl(const TransformerLayerOptions& options);
  void reset() override;
  // x [B, S, D], mask [B, 1, 1, S] (true = may attend) -> [B, S, D].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask = {});

  TransformerLayerOptions options;
  MultiHeadAttention self_attn{nullptr};
  FeedForward ffn{nullptr};
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  Dropout dropout{nullptr};
};
TORCH_MODULE(TransformerEncoderLayer);

}  // namespace torchmt
