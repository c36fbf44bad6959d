#include "torchmt/model/transformer_encoder_layer.h"

#include <torch/torch.h>

#include "model/add_layer_norm.h"

namespace torchmt {

void FeedForwardSlot::build(torch::nn::Module& layer, const TransformerLayerOptions& options) {
  const int64_t d = options.embed_dim();
  if (options.experts() > 0) {
    dense = nullptr;
    moe = layer.register_module("ffn", MoELayer(MoELayerOptions(d, options.ff_dim(), options.experts())
                                                    .top_k(options.top_k())
                                                    .dropout(options.dropout())
                                                    .activation(options.activation())));
  } else {
    moe = nullptr;
    dense = layer.register_module("ffn", FeedForward(FeedForwardOptions(d, options.ff_dim())
                                                         .dropout(options.dropout())
                                                         .activation(options.activation())));
  }
}

TransformerEncoderLayerImpl::TransformerEncoderLayerImpl(const TransformerLayerOptions& options_)
    : options(options_) {
  reset();
}

void TransformerEncoderLayerImpl::reset() {
  const int64_t d = options.embed_dim();
  self_attn = register_module(
      "self_attn", MultiHeadAttention(MultiHeadAttentionOptions(d, options.num_heads()).dropout(options.dropout()).kv_heads(options.kv_heads())));
  ffn.build(*this, options);
  norm1 = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  norm2 = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  dropout = register_module("dropout", Dropout(options.dropout()));
}

torch::Tensor TransformerEncoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& mask,
                                                   const RotaryTables& rotary) {
  if (options.norm() == Norm::kPre) {
    auto n = layer_norm(norm1, x);
    torch::Tensor h;
    const auto ffn_in = add_layer_norm(norm2, x, self_attn(n, n, n, mask, /*causal=*/false, rotary), dropout, &h);
    return dropout->residual(h, ffn(ffn_in));
  }
  // Residual sum and LayerNorm: one fused pass in CPU inference; in training the dropout and the
  // sum are one (add_layer_norm.h).
  auto h = add_layer_norm(norm1, x, self_attn(x, x, x, mask, /*causal=*/false, rotary), dropout);
  return add_layer_norm(norm2, h, ffn(h), dropout);
}

}  // namespace torchmt
