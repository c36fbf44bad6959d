#pragma once
// ModelConfig: every hyper-parameter that decides the shape of a Transformer, with the
// paper's presets. Serialised as flat JSON (through one option table) so a checkpoint and an
// export carry it.
#include <cstdint>
#include <string>

namespace torchmt {

// The feed-forward activation: ReLU as in the paper, GELU as in the reference code.
enum class Activation { kReLU, kGELU };
// "relu" | "gelu" (the names in configs and flags); throws std::invalid_argument otherwise.
Activation parse_activation(const std::string& name);
std::string activation_name(Activation activation);

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
  int64_t pad_id = 0;

  // "base" (paper), "big" (paper), "small" (CPU-sized for Multi30k), "tiny" (tests).
  static ModelConfig preset(const std::string& name);
  // Throws std::invalid_argument naming the offending field.
  void validate() const;
  std::string to_json() const;
  // Every field must be present (a checkpoint or export written by torchmt has them all).
  static ModelConfig from_json(const std::string& json);
};

}  // namespace torchmt
