#pragma once
// ModelConfig: every hyper-parameter that decides the shape of a Transformer, with the
// paper's presets. Serialised as flat JSON (through one option table) so a checkpoint and an
// export carry it.
#include <cstdint>
#include <string>
#include <vector>

#include "torchmt/data/special_ids.h"

namespace torchmt {

// The feed-forward activation: ReLU as in the paper, GELU as in the reference code, swish
// (x * sigmoid(x), SiLU) as in Marian's OPUS-MT models.
enum class Activation { kReLU, kGELU, kSwish };
// "relu" | "gelu" | "swish" (the names in configs and flags); throws std::invalid_argument otherwise.
Activation parse_activation(const std::string& name);
std::string activation_name(Activation activation);

// Where each sub-layer's LayerNorm sits: after the residual sum as in the paper (post), or
// on the sub-layer's input with one final LayerNorm per stack (pre; reference 004's
// "what modern models use").
enum class Norm { kPost, kPre };
Norm parse_norm(const std::string& name);  // "post" | "pre"
std::string norm_name(Norm norm);

// How positions enter the model: the paper's sinusoidal table added to the embeddings, a
// learned table in its place, or rotary embeddings applied to self-attention's queries and
// keys (reference 000 section 4.4 and 002: apply_rotary_pos_emb / rotate_half).
enum class Positions { kSinusoidal, kLearned, kRope };
Positions parse_positions(const std::string& name);  // "sinusoidal" | "learned" | "rope"
std::string positions_name(Positions positions);

// Each layer's feed-forward network: one dense FFN (paper), or a mixture of `experts` FFNs of
// which each token uses its `top_k` best (reference 002's MoELayer).
enum class Ffn { kDense, kMoe };
Ffn parse_ffn(const std::string& name);  // "dense" | "moe"
std::string ffn_name(Ffn ffn);

struct ModelConfig {
  int64_t src_vocab_size = 8000;
  int64_t tgt_vocab_size = 8000;
  int64_t d_model = 512;
  int64_t num_heads = 8;
  int64_t num_encoder_layers = 6;
  int64_t num_decoder_layers = 6;
  int64_t d_ff = 2048;
  double dropout = 0.1;
  // Rows of the sinusoidal table (buffer `pe`): the longest sequence, source or target, the
  // model accepts (the reference documents' PositionalEncoding max_len; "max_len" in files
  // written before 0.2.0).
  int64_t max_positions = 1024;
  Activation activation = Activation::kReLU;
  // Share source, target and output embeddings (needs one joint vocabulary).
  bool tie_embeddings = false;
  // Special token ids. torchmt's vocabularies have pad 0, unk 1, bos 2, eos 3; an imported
  // Marian model has its own (eos 0, unk 1, pad last, and pad also starts the decoder: bos_id).
  int64_t pad_id = 0;
  int64_t unk_id = 1;
  int64_t bos_id = 2;  // the decoder's start token
  int64_t eos_id = 3;
  // Embeddings multiplied by sqrt(d_model) (the paper; Marian's scale_embedding).
  bool scale_embeddings = true;
  Norm norm = Norm::kPost;
  Positions positions = Positions::kSinusoidal;
  // Key/value heads of every attention (grouped-query attention, reference 002's
  // GroupedQueryAttention num_groups): 0 = num_heads (multi-head attention), 1 = multi-query.
  int64_t kv_heads = 0;
  Ffn ffn = Ffn::kDense;
  int64_t experts = 4;  // ffn: moe
  int64_t top_k = 2;    // ffn: moe
  // Recompute each layer's activations in backward instead of keeping them (reference 002's
  // CheckpointTransformerLayer; torchmt/model/activation_checkpoint.h). Training only.
  bool checkpoint_activations = false;

  int64_t key_value_heads() const { return kv_heads > 0 ? kv_heads : num_heads; }
  SpecialIds special_ids() const { return {pad_id, unk_id, bos_id, eos_id}; }

  // "base" / "paper-base" (paper), "big" (paper), "small" / "paper-small" (CPU-sized for
  // Multi30k), "modern-small" / "modern-base" (the same sizes with Pre-LN, rotary positions and
  // grouped-query attention), "tiny" (tests).
  static ModelConfig preset(const std::string& name);
  // Throws std::invalid_argument naming the offending field.
  void validate() const;
  std::string to_json() const;
  // Where `other` is another model: its fields that differ, "d_model 256 against 512, ..." (this
  // one's value first), "" when none. Dropout and activation checkpointing are how a model trains,
  // not what it is: not compared.
  std::string shape_differences(const ModelConfig& other) const;
  // Every field must be present (a checkpoint or export written by torchmt has them all),
  // except those added after 0.2 (norm, positions, kv_heads, ffn, experts, top_k,
  // checkpoint_activations, unk_id, bos_id, eos_id, scale_embeddings), which
  // default to the paper's.
  static ModelConfig from_json(const std::string& json);
};

// Every switch of the model on top of `base`, one variant each (each other activation, norm,
// positions and ffn; multi- and grouped-query attention; tied and unscaled embeddings), and the
// modern preset's switches together. The exporters' tests run them all: a new switch is a row
// of model_config.cpp's tables (or a variant here), and those tests fail until every exporter
// translates it as the checkpoint does or refuses it by name.
struct ModelVariant {
  std::string name;  // "positions=rope", "kv_heads=1", "modern", ...
  ModelConfig config;
};
std::vector<ModelVariant> model_variants(const ModelConfig& base);

}  // namespace torchmt
