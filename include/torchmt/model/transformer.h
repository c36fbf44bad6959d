#pragma once
// The encoder-decoder Transformer, mirrors the reference `Transformer`: src_embedding,
// tgt_embedding, pos_encoding, encoder_layers, decoder_layers, fc_out; embeddings are
// scaled by sqrt(d_model). State-dict keys and shapes equal the reference's. With Pre-LN
// (norm: pre) each stack ends in a LayerNorm, encoder_norm and decoder_norm.
#include <vector>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "torchmt/model/kv_cache.h"
#include "torchmt/model/model_config.h"
#include "torchmt/model/positional_encoding.h"
#include "torchmt/model/transformer_decoder_layer.h"
#include "torchmt/model/transformer_encoder_layer.h"

namespace torchmt {

class TransformerImpl : public torch::nn::Cloneable<TransformerImpl> {
 public:
  explicit TransformerImpl(const ModelConfig& config);
  // Builds the submodules (LibTorch's reset()), then reset_parameters() unless a
  // SkipParameterInit is alive (a model about to be loaded: torchmt/model/linear.h).
  void reset() override;
  // Fresh weights for training from scratch; see transformer.cpp for the scheme.
  void reset_parameters();

  // src [B, S] token ids -> memory [B, S, D].
  torch::Tensor encode(const torch::Tensor& src, const torch::Tensor& src_mask = {});
  // tgt [B, T] -> decoder output [B, T, D] (before fc_out). `cross_weights`, when given,
  // receives the cross-attention weights [B, H, T, S] of every layer (explicit path).
  torch::Tensor decode(const torch::Tensor& tgt, const torch::Tensor& memory, const torch::Tensor& src_mask = {},
                       const torch::Tensor& tgt_mask = {}, std::vector<torch::Tensor>* cross_weights = nullptr);
  // Logits [B, T, V] with the caller's masks (as the reference forward).
  torch::Tensor forward(const torch::Tensor& src, const torch::Tensor& tgt, const torch::Tensor& src_mask,
                        const torch::Tensor& tgt_mask);
  // Logits [B, T, V] with padding and causal masks built from config().pad_id.
  torch::Tensor forward(const torch::Tensor& src, const torch::Tensor& tgt);

  // Logits [B, T, C] of the output columns `columns` [C] (int64 ids, ascending) only: training
  // over the open columns (close_output_columns) computes and differentiates no others.
  torch::Tensor forward_columns(const torch::Tensor& src, const torch::Tensor& tgt, const torch::Tensor& columns);

  // Output columns a model can never predict (pieces its training targets never hold) are closed:
  // their fc_out bias is kClosedColumnBias, so their probability is zero (below fp32's smallest
  // number after the softmax) in every consumer, search, scoring and exports alike, with no mask
  // to carry. `open` [V] bool; a closed column that `open` opens again gets bias 0.
  static constexpr float kClosedColumnBias = -1e4f;
  void close_output_columns(const torch::Tensor& open);
  // [V] bool: the columns whose bias is above kClosedColumnBias / 10 (every one without a bias).
  torch::Tensor open_output_columns() const;

  // Incremental decoding: cache for a batch of encoded sources, then one step at a time.
  DecoderCache start_cache(const torch::Tensor& memory, const torch::Tensor& src_mask);
  // last_tokens [B] -> logits [B, V] for the next position; extends the cache.
  torch::Tensor decode_step(const torch::Tensor& last_tokens, DecoderCache& cache);
  // decode_step without fc_out: the decoder's output for the next position, [B, D].
  torch::Tensor decode_step_hidden(const torch::Tensor& last_tokens, DecoderCache& cache);

  const ModelConfig& config() const { return config_; }
  // ffn: moe: the sum of every MoELayer's load-balancing loss from the last forward pass
  // (scalar); undefined for a dense model.
  torch::Tensor moe_aux_loss() const;

  torch::nn::Embedding src_embedding{nullptr}, tgt_embedding{nullptr};
  PositionalEncoding pos_encoding{nullptr};
  torch::nn::ModuleList encoder_layers{nullptr}, decoder_layers{nullptr};
  torch::nn::Linear fc_out{nullptr};
  torch::nn::LayerNorm encoder_norm{nullptr}, decoder_norm{nullptr};  // Pre-LN only

 private:
  void tie_embeddings();
  ModelConfig config_;
  double embed_scale_ = 1.0;
};
TORCH_MODULE(Transformer);

// The ids a [V] bool mask of output columns holds (open_output_columns, a corpus's pieces), ascending.
std::vector<int64_t> column_ids(const torch::Tensor& mask);

// Parameter count (tied tensors counted once).
int64_t count_parameters(const Transformer& model);

}  // namespace torchmt
