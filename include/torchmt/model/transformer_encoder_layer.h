#pragma once
// One encoder layer (paper §3.1), mirrors the reference `TransformerEncoderLayer`:
// self_attn, ffn, norm1, norm2 and a dropout on each sub-layer output. Post-norm as in the
// paper (x = norm(x + sublayer(x))) or Pre-LN (x = x + sublayer(norm(x)), reference 004).
#include <string>

#include <torch/nn/cloneable.h>
#include "torchmt/model/dropout.h"
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "torchmt/model/feed_forward.h"
#include "torchmt/model/moe_layer.h"
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
  TORCH_ARG(Norm, norm) = Norm::kPost;
  TORCH_ARG(int64_t, kv_heads) = 0;  // 0 = num_heads
  TORCH_ARG(int64_t, experts) = 0;   // > 0: the ffn is a MoELayer of that many experts
  TORCH_ARG(int64_t, top_k) = 2;
};

// The layer's feed-forward sub-layer, dense or a mixture of experts (registered as "ffn"
// either way), built from the layer options.
struct FeedForwardSlot {
  FeedForward dense{nullptr};
  MoELayer moe{nullptr};
  void build(torch::nn::Module& layer, const TransformerLayerOptions& options);
  torch::Tensor operator()(const torch::Tensor& x) { return moe ? moe(x) : dense(x); }
};

class TransformerEncoderLayerImpl : public torch::nn::Cloneable<TransformerEncoderLayerImpl> {
 public:
  explicit TransformerEncoderLayerImpl(const TransformerLayerOptions& options);
  void reset() override;
  // x [B, S, D], mask [B, 1, 1, S] (true = may attend) -> [B, S, D]; `rotary`: the tables of
  // positions 0..S-1 (positions: rope).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask = {}, const RotaryTables& rotary = {});

  TransformerLayerOptions options;
  MultiHeadAttention self_attn{nullptr};
  FeedForwardSlot ffn;
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  Dropout dropout{nullptr};
};
TORCH_MODULE(TransformerEncoderLayer);

}  // namespace torchmt
