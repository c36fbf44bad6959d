#pragma once
// One decoder layer (paper §3.1, post-norm or Pre-LN as the encoder layer), mirrors the reference `TransformerDecoderLayer`:
// self_attn (masked), cross_attn over the encoder output, ffn, norm1..norm3, dropout.
#include <torch/nn/cloneable.h>
#include "torchmt/model/dropout.h"
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "torchmt/model/kv_cache.h"
#include "torchmt/model/transformer_encoder_layer.h"

namespace torchmt {

class TransformerDecoderLayerImpl : public torch::nn::Cloneable<TransformerDecoderLayerImpl> {
 public:
  explicit TransformerDecoderLayerImpl(const TransformerLayerOptions& options);
  void reset() override;

  // x [B, T, D], memory [B, S, D], src_mask [B, 1, 1, S], tgt_mask [B, 1, T, T] -> [B, T, D].
  // When `cross_weights` is given the cross-attention runs the explicit path and stores
  // its weights [B, H, T, S] there.
  // `rotary`: the tables of positions 0..T-1 for the self-attention (positions: rope).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& memory, const torch::Tensor& src_mask = {},
                        const torch::Tensor& tgt_mask = {}, torch::Tensor* cross_weights = nullptr,
                        const RotaryTables& rotary = {});

  // Fills cache.cross_k / cross_v from the encoder output (once per sentence).
  void prepare_cache(const torch::Tensor& memory, LayerKVCache& cache);
  // x [B, 1, D]: the newest target position; attends to the cached positions and itself,
  // appends its K/V to the cache (rotated at its position when `rotary` holds that
  // position's tables). Equal to forward() on the full prefix, last row. `self_mask`
  // [B, 1, 1, t + 1]: which cached columns each row may see, for rows that joined the batch
  // at different steps (DecoderCache::start); undefined = all of them.
  torch::Tensor forward_step(const torch::Tensor& x, LayerKVCache& cache, const torch::Tensor& src_mask,
                             const RotaryTables& rotary = {}, const torch::Tensor& self_mask = {});

  TransformerLayerOptions options;
  MultiHeadAttention self_attn{nullptr}, cross_attn{nullptr};
  FeedForwardSlot ffn;
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr}, norm3{nullptr};
  Dropout dropout{nullptr};
};
TORCH_MODULE(TransformerDecoderLayer);

}  // namespace torchmt
