#include "torchmt/model/model_config.h"

#include <stdexcept>

#include "torchmt/util/flat_config.h"

namespace torchmt {

Activation parse_activation(const std::string& name) {
  if (name == "relu") return Activation::kReLU;
  if (name == "gelu") return Activation::kGELU;
  throw std::invalid_argument("activation must be relu or gelu, got '" + name + "'");
}

std::string activation_name(Activation activation) { return activation == Activation::kGELU ? "gelu" : "relu"; }

ModelConfig ModelConfig::preset(const std::string& name) {
  ModelConfig c;
  if (name == "base") {
    // Paper defaults (the struct's own defaults).
  } else if (name == "big") {
    c.d_model = 1024; c.num_heads = 16; c.d_ff = 4096; c.dropout = 0.3;
  } else if (name == "small") {
    c.d_model = 256; c.num_heads = 4; c.num_encoder_layers = 3; c.num_decoder_layers = 3;
    c.d_ff = 1024; c.dropout = 0.1; c.tie_embeddings = true;
  } else if (name == "tiny") {
    c.d_model = 64; c.num_heads = 4; c.num_encoder_layers = 2; c.num_decoder_layers = 2;
    c.d_ff = 128; c.dropout = 0.0; c.max_len = 256;
  } else {
    throw std::invalid_argument("unknown model preset '" + name + "' (expected tiny, small, base or big)");
  }
  return c;
}

void ModelConfig::validate() const {
  auto require = [](bool ok, const std::string& msg) {
    if (!ok) throw std::invalid_argument("invalid model config: " + msg);
  };
  require(src_vocab_size > 0 && tgt_vocab_size > 0, "vocabulary sizes must be positive");
  require(d_model > 0 && num_heads > 0, "d_model and num_heads must be positive");
  require(d_model % num_heads == 0, "d_model (" + std::to_string(d_model) + ") must be divisible by num_heads (" +
                                        std::to_string(num_heads) + ")");
  require(num_encoder_layers >= 1 && num_decoder_layers >= 1, "need at least one encoder and one decoder layer");
  require(d_ff > 0, "d_ff must be positive");
  require(dropout >= 0.0 && dropout < 1.0, "dropout must be in [0, 1)");
  require(max_len > 0, "max_len must be positive");
  require(!tie_embeddings || src_vocab_size == tgt_vocab_size,
          "tied embeddings need one joint vocabulary (src and tgt sizes differ)");
  require(pad_id >= 0 && pad_id < std::min(src_vocab_size, tgt_vocab_size), "pad_id out of range");
}

std::string ModelConfig::to_json() const {
  FlatConfig f;
  f.set("src_vocab_size", std::to_string(src_vocab_size));
  f.set("tgt_vocab_size", std::to_string(tgt_vocab_size));
  f.set("d_model", std::to_string(d_model));
  f.set("num_heads", std::to_string(num_heads));
  f.set("num_encoder_layers", std::to_string(num_encoder_layers));
  f.set("num_decoder_layers", std::to_string(num_decoder_layers));
  f.set("d_ff", std::to_string(d_ff));
  f.set("dropout", std::to_string(dropout));
  f.set("max_len", std::to_string(max_len));
  f.set("activation", activation_name(activation));
  f.set("tie_embeddings", tie_embeddings ? "true" : "false");
  f.set("pad_id", std::to_string(pad_id));
  return f.to_json();
}

ModelConfig ModelConfig::from_json(const std::string& json) {
  FlatConfig f = FlatConfig::parse(json);
  ModelConfig c;
  c.src_vocab_size = f.get_int("src_vocab_size");
  c.tgt_vocab_size = f.get_int("tgt_vocab_size");
  c.d_model = f.get_int("d_model");
  c.num_heads = f.get_int("num_heads");
  c.num_encoder_layers = f.get_int("num_encoder_layers");
  c.num_decoder_layers = f.get_int("num_decoder_layers");
  c.d_ff = f.get_int("d_ff");
  c.dropout = f.get_double("dropout");
  c.max_len = f.get_int("max_len");
  c.activation = parse_activation(f.get("activation"));
  c.tie_embeddings = f.get_bool("tie_embeddings");
  c.pad_id = f.get_int("pad_id");
  c.validate();
  return c;
}

}  // namespace torchmt
