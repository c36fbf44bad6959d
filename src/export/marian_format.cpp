#include "export/marian_format.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "torchmt/data/tokenizer.h"
#include "io/pickled_state_dict.h"
#include "io/safetensors.h"
#include "model/linear.h"
#include "util/atomic_file.h"
#include "torchmt/util/strings.h"

namespace torchmt {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Sizes beyond these are refused before anything is allocated (OPUS-MT big: d_model 1024,
// 12 layers, 64 k pieces).
constexpr int64_t kMaxWidth = 16384, kMaxLayers = 128, kMaxVocab = 1 << 21, kMaxPositions = 1 << 16;

std::vector<std::string> split_name(const std::string& name) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t dot; (dot = name.find('.', start)) != std::string::npos; start = dot + 1)
    parts.push_back(name.substr(start, dot - start));
  parts.push_back(name.substr(start));
  return parts;
}

std::string shape_string(at::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string read_bounded(const fs::path& path, uint64_t limit) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error(path.string() + ": not found or unreadable");
  const auto size = static_cast<uint64_t>(in.tellg());
  if (size > limit) throw std::runtime_error(path.string() + ": larger than " + std::to_string(limit >> 20) + " MB");
  in.seekg(0);
  std::string bytes(size, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  return bytes;
}

json read_json(const fs::path& path) {
  try {
    return json::parse(read_bounded(path, 256ull << 20));
  } catch (const json::exception& e) {
    throw std::runtime_error(path.string() + ": not valid JSON (" + first_line(e.what()) + ")");
  }
}

// torchmt's parameter name -> Marian's (the state dict of transformers' MarianMTModel).
std::string marian_name(const std::string& name) {
  std::vector<std::string> parts = split_name(name);
  static const std::map<std::string, std::string> kAttention = {
      {"W_q", "q_proj"}, {"W_k", "k_proj"}, {"W_v", "v_proj"}, {"W_o", "out_proj"}};
  auto join_from = [&](size_t i) {
    std::string s;
    for (; i < parts.size(); ++i) s += (s.empty() ? "" : ".") + parts[i];
    return s;
  };
  if (name == "src_embedding.weight") return "model.encoder.embed_tokens.weight";
  if (name == "tgt_embedding.weight") return "model.decoder.embed_tokens.weight";
  if (name == "fc_out.weight") return "lm_head.weight";
  if (name == "fc_out.bias") return "final_logits_bias";
  const bool encoder = parts[0] == "encoder_layers", decoder = parts[0] == "decoder_layers";
  if ((!encoder && !decoder) || parts.size() < 4) return "";
  const std::string prefix = std::string(encoder ? "model.encoder" : "model.decoder") + ".layers." + parts[1] + ".";
  const std::string& block = parts[2];
  if ((block == "self_attn" || block == "cross_attn") && kAttention.count(parts[3]))
    return prefix + (block == "self_attn" ? "self_attn." : "encoder_attn.") + kAttention.at(parts[3]) + "." + join_from(4);
  if (block == "ffn" && (parts[3] == "linear1" || parts[3] == "linear2"))
    return prefix + (parts[3] == "linear1" ? "fc1." : "fc2.") + join_from(4);
  static const std::map<std::string, std::string> kEncoderNorms = {{"norm1", "self_attn_layer_norm"},
                                                                   {"norm2", "final_layer_norm"}};
  static const std::map<std::string, std::string> kDecoderNorms = {
      {"norm1", "self_attn_layer_norm"}, {"norm2", "encoder_attn_layer_norm"}, {"norm3", "final_layer_norm"}};
  const auto& norms = encoder ? kEncoderNorms : kDecoderNorms;
  if (norms.count(block)) return prefix + norms.at(block) + "." + join_from(3);
  return "";
}

// The dimension of a torchmt parameter that runs over the model width (permuted between the
// two sinusoid layouts), or -1 (head space, FFN width, vocabulary rows).
int64_t model_width_dim(const std::string& name) {
  auto ends = [&](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends("embedding.weight") || ends("fc_out.weight")) return 1;
  if (ends("W_q.weight") || ends("W_k.weight") || ends("W_v.weight") || ends("linear1.weight")) return 1;
  if (ends("W_o.weight") || ends("W_o.bias") || ends("linear2.weight") || ends("linear2.bias")) return 0;
  if (name.find(".norm") != std::string::npos) return 0;
  return -1;
}

// Marian column -> torchmt column: sine k -> 2k, cosine k -> 2k + 1. index[j] = the Marian
// column that torchmt's column j takes.
at::Tensor to_torchmt_order(int64_t d) {
  auto k = torch::arange(d / 2, torch::kLong);
  return torch::stack({k, k + d / 2}, 1).reshape({d});  // [d/2, 2] -> [d]: k, d/2 + k, ...
}

int64_t get_int(const json& config, const std::string& key, const fs::path& file, int64_t low, int64_t high) {
  if (!config.contains(key)) throw std::runtime_error(file.string() + ": lacks '" + key + "'");
  if (!config[key].is_number_integer())
    throw std::runtime_error(file.string() + ": '" + key + "' is not an integer");
  const int64_t v = config[key].get<int64_t>();
  if (v < low || v > high)
    throw std::runtime_error(file.string() + ": '" + key + "' is " + std::to_string(v) + ", outside [" +
                             std::to_string(low) + ", " + std::to_string(high) + "]");
  return v;
}

bool get_bool(const json& config, const std::string& key, bool fallback) {
  return config.contains(key) && config[key].is_boolean() ? config[key].get<bool>() : fallback;
}

// The weights of a directory: model.safetensors, else pytorch_model.bin (torch.save's zip).
std::map<std::string, at::Tensor> read_weights(const fs::path& dir, uint64_t* bytes) {
  const fs::path safetensors = dir / "model.safetensors", pickle = dir / "pytorch_model.bin";
  if (fs::exists(safetensors)) {
    *bytes = fs::file_size(safetensors);
    return read_safetensors(safetensors.string());
  }
  if (!fs::exists(pickle))
    throw std::runtime_error(dir.string() + ": holds neither model.safetensors nor pytorch_model.bin");
  *bytes = fs::file_size(pickle);
  return read_pickled_state_dict(pickle.string());
}

}  // namespace

LoadedCheckpoint import_marian(const std::string& directory) {
  const fs::path dir(directory);
  if (!fs::is_directory(dir)) throw std::runtime_error(directory + ": not a directory");
  const fs::path config_file = dir / "config.json";
  const json config = read_json(config_file);
  if (!config.is_object()) throw std::runtime_error(config_file.string() + ": not a JSON object");
  if (config.value("model_type", std::string()) != "marian")
    throw std::runtime_error(config_file.string() + ": model_type is not 'marian'");
  // Fields of the BART family that change the computation: refused when they would.
  for (const auto& [key, refused] : std::vector<std::pair<std::string, bool>>{{"normalize_before", true},
                                                                              {"normalize_embedding", true},
                                                                              {"add_final_layer_norm", true},
                                                                              {"add_bias_logits", true},
                                                                              {"static_position_embeddings", false}})
    if (config.contains(key) && config[key].is_boolean() && config[key].get<bool>() == refused)
      throw std::runtime_error(config_file.string() + ": '" + key + ": " + (refused ? "true" : "false") +
                               "' is not a configuration torchmt can express");

  ModelConfig c;
  c.d_model = get_int(config, "d_model", config_file, 2, kMaxWidth);
  c.num_encoder_layers = get_int(config, "encoder_layers", config_file, 1, kMaxLayers);
  c.num_decoder_layers = get_int(config, "decoder_layers", config_file, 1, kMaxLayers);
  c.num_heads = get_int(config, "encoder_attention_heads", config_file, 1, kMaxWidth);
  if (get_int(config, "decoder_attention_heads", config_file, 1, kMaxWidth) != c.num_heads)
    throw std::runtime_error(config_file.string() + ": decoder_attention_heads differs from encoder_attention_heads "
                             "(torchmt has one head count)");
  c.d_ff = get_int(config, "encoder_ffn_dim", config_file, 1, 8 * kMaxWidth);
  if (get_int(config, "decoder_ffn_dim", config_file, 1, 8 * kMaxWidth) != c.d_ff)
    throw std::runtime_error(config_file.string() + ": decoder_ffn_dim differs from encoder_ffn_dim "
                             "(torchmt has one feed-forward width)");
  const int64_t vocab = get_int(config, "vocab_size", config_file, 4, kMaxVocab);
  if (config.contains("decoder_vocab_size") && !config["decoder_vocab_size"].is_null() &&
      get_int(config, "decoder_vocab_size", config_file, 4, kMaxVocab) != vocab)
    throw std::runtime_error(config_file.string() + ": decoder_vocab_size differs from vocab_size (separate source "
                             "and target vocabularies are not supported)");
  c.src_vocab_size = c.tgt_vocab_size = vocab;
  c.max_positions = get_int(config, "max_position_embeddings", config_file, 1, kMaxPositions);
  if (c.d_model % c.num_heads != 0 || c.d_model % 2 != 0)
    throw std::runtime_error(config_file.string() + ": d_model " + std::to_string(c.d_model) +
                             " must be even and a multiple of the heads");
  if (config.contains("activation_function") && !config["activation_function"].is_string())
    throw std::runtime_error(config_file.string() + ": 'activation_function' is not a string");
  const std::string activation = config.value("activation_function", std::string("swish"));
  if (activation == "swish" || activation == "silu") {
    c.activation = Activation::kSwish;
  } else if (activation == "relu" || activation == "gelu") {
    c.activation = parse_activation(activation);
  } else {
    throw std::runtime_error(config_file.string() + ": activation_function '" + escape_control(activation) +
                             "' is not one torchmt has (swish, relu, gelu)");
  }
  c.scale_embeddings = get_bool(config, "scale_embedding", false);
  c.dropout = config.contains("dropout") && config["dropout"].is_number() ? config["dropout"].get<double>() : 0.1;
  if (!(c.dropout >= 0.0 && c.dropout < 1.0)) c.dropout = 0.1;
  c.pad_id = get_int(config, "pad_token_id", config_file, 0, vocab - 1);
  c.eos_id = get_int(config, "eos_token_id", config_file, 0, vocab - 1);
  c.bos_id = config.contains("decoder_start_token_id") && !config["decoder_start_token_id"].is_null()
                 ? get_int(config, "decoder_start_token_id", config_file, 0, vocab - 1)
                 : c.pad_id;
  const bool share_embeddings = get_bool(config, "share_encoder_decoder_embeddings", true);
  const bool tie_output = get_bool(config, "tie_word_embeddings", true);
  c.tie_embeddings = share_embeddings && tie_output;

  if (fs::exists(dir / "target_vocab.json"))
    throw std::runtime_error(directory + ": has target_vocab.json (separate source and target vocabularies are not "
                             "supported)");
  // vocab.json: piece -> id, every id of [0, vocab) once.
  const fs::path vocab_file = dir / "vocab.json";
  const json vocab_json = read_json(vocab_file);
  if (!vocab_json.is_object() || static_cast<int64_t>(vocab_json.size()) != vocab)
    throw std::runtime_error(vocab_file.string() + ": not an object of " + std::to_string(vocab) +
                             " pieces (config.json's vocab_size)");
  std::vector<std::string> pieces(static_cast<size_t>(vocab));
  std::vector<bool> seen(static_cast<size_t>(vocab), false);
  for (const auto& [piece, id] : vocab_json.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab ||
        seen[static_cast<size_t>(id.get<int64_t>())])
      throw std::runtime_error(vocab_file.string() + ": the id of '" + escape_control(piece) +
                               "' is not a distinct integer in [0, " + std::to_string(vocab) + ")");
    seen[static_cast<size_t>(id.get<int64_t>())] = true;
    pieces[static_cast<size_t>(id.get<int64_t>())] = piece;
  }
  if (!vocab_json.contains("<unk>")) throw std::runtime_error(vocab_file.string() + ": has no '<unk>' piece");
  c.unk_id = vocab_json["<unk>"].get<int64_t>();
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(config_file.string() + ": " + e.what());
  }

  CheckpointMeta meta;
  meta.model = c;
  meta.vocabulary = Vocabulary::pieces_to_json(pieces);
  meta.src_spm_path = (dir / "source.spm").string();
  meta.tgt_spm_path = (dir / "target.spm").string();
  meta.src_spm_model = read_bounded(dir / "source.spm", 1ull << 30);
  meta.tgt_spm_model = read_bounded(dir / "target.spm", 1ull << 30);
  const auto [src_tok, tgt_tok] = [&] {
    try {
      return checkpoint_tokenizers(meta);
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(directory + ": the tokenizer " + e.what());
    }
  }();
  Tokenizer::check_complete(meta.src_spm_model, meta.src_spm_path);
  Tokenizer::check_complete(meta.tgt_spm_model, meta.tgt_spm_path);
  meta.src_spm_checksum = src_tok.checksum();
  meta.tgt_spm_checksum = tgt_tok.checksum();

  // The weights file must hold at least the configuration's parameters (at 2 bytes each):
  // checked before the model is allocated, so absurd sizes cost nothing.
  uint64_t weight_bytes = 0;
  const fs::path weights_path = fs::exists(dir / "model.safetensors") ? dir / "model.safetensors" : dir / "pytorch_model.bin";
  if (fs::exists(weights_path)) weight_bytes = fs::file_size(weights_path);
  const double d = static_cast<double>(c.d_model), f = static_cast<double>(c.d_ff);
  const double layer = 4 * d * d + 2 * d * f;
  const double expected = static_cast<double>(c.num_encoder_layers) * layer +
                          static_cast<double>(c.num_decoder_layers) * (layer + 4 * d * d) +
                          static_cast<double>(vocab) * d;
  if (expected * 2 > static_cast<double>(weight_bytes) + 1e6)
    throw std::runtime_error(config_file.string() + ": describes " + std::to_string(static_cast<int64_t>(expected)) +
                             " parameters, more than " + weights_path.string() + " (" + std::to_string(weight_bytes) +
                             " bytes) holds");
  const auto weights = read_weights(dir, &weight_bytes);

  Transformer model{nullptr};
  {
    SkipParameterInit skip;
    model = Transformer(c);
  }
  torch::NoGradGuard no_grad;
  const auto order = to_torchmt_order(c.d_model);
  std::set<std::string> used;
  std::set<const void*> filled;
  auto lookup = [&](const std::string& name) -> const at::Tensor* {
    for (const std::string& key : {name, name.rfind("model.", 0) == 0 ? name.substr(6) : "model." + name}) {
      auto it = weights.find(key);
      if (it != weights.end()) {
        used.insert(key);
        return &it->second;
      }
    }
    return nullptr;
  };
  for (auto& item : model->named_parameters()) {
    const std::string& name = item.key();
    at::Tensor& param = item.value();
    if (filled.count(param.data_ptr())) continue;  // a tied tensor, filled under its first name
    const std::string source = marian_name(name);
    if (source.empty()) throw std::logic_error("no Marian name for " + name);
    const at::Tensor* w = lookup(source);
    // Embeddings: one shared matrix (model.shared), the decoder's for the output projection.
    if (!w && (name == "src_embedding.weight" || name == "tgt_embedding.weight")) w = lookup("model.shared.weight");
    if (!w && name == "fc_out.weight" && tie_output)
      w = lookup("model.decoder.embed_tokens.weight") ? lookup("model.decoder.embed_tokens.weight")
                                                       : lookup("model.shared.weight");
    if (!w && name == "fc_out.bias") {
      param.zero_();  // transformers writes final_logits_bias; a file without it means zeros
      filled.insert(param.data_ptr());
      continue;
    }
    if (!w) throw std::runtime_error(weights_path.string() + ": lacks " + source);
    at::Tensor value = name == "fc_out.bias" ? w->reshape({-1}) : *w;  // final_logits_bias [1, V]
    if (value.sizes() != param.sizes())
      throw std::runtime_error(weights_path.string() + ": " + source + " has shape " + shape_string(value.sizes()) +
                               ", config.json implies " + shape_string(param.sizes()));
    const int64_t dim = model_width_dim(name);
    param.copy_(dim >= 0 ? value.index_select(dim, order) : value);
    filled.insert(param.data_ptr());
  }
  for (const auto& [key, tensor] : weights) {
    if (used.count(key) || key.find("embed_positions") != std::string::npos) continue;
    if (key == "model.shared.weight" || key.find("embed_tokens") != std::string::npos || key == "lm_head.weight")
      continue;  // the same matrices under their other names
    throw std::runtime_error(weights_path.string() + ": holds " + key + ", which torchmt's model has no place for");
  }
  model->eval();
  return LoadedCheckpoint{meta, model};
}

void MarianExporter::write(const LoadedCheckpoint& checkpoint, const ExportOptions& options, const std::string& path) {
  const ModelConfig& c = checkpoint.meta.model;
  if (!checkpoint.model) throw std::invalid_argument("no model to export");
  auto refuse = [](const std::string& what) {
    throw std::invalid_argument("Marian export: the format has no " + what + " (use --format torchscript or ctranslate2)");
  };
  if (c.norm != Norm::kPost) refuse("Pre-LN layers (this model has norm: pre)");
  if (c.positions != Positions::kSinusoidal) refuse(positions_name(c.positions) + " positions (this model has positions: " +
                                                    positions_name(c.positions) + ")");
  if (c.key_value_heads() != c.num_heads) refuse("grouped-query attention (this model has kv_heads " + std::to_string(c.kv_heads) + ")");
  if (c.ffn != Ffn::kDense) refuse("mixture-of-experts feed-forward (this model has ffn: moe)");
  if (c.d_model % 2 != 0) refuse("odd model width");
  if (options.quantize_int8 || options.dtype != c10::ScalarType::Float || options.freeze)
    throw std::invalid_argument("Marian export: fp32 weights only (drop --dtype / --quantization / --freeze)");
  const bool joint = checkpoint.meta.tgt_spm_model.empty() || checkpoint.meta.tgt_spm_model == checkpoint.meta.src_spm_model;
  if (checkpoint.meta.vocabulary.empty() && (!joint || c.src_vocab_size != c.tgt_vocab_size))
    refuse("separate source and target vocabularies (this model has two SentencePiece models)");
  if (fs::exists(path) && !(fs::is_directory(path) && (fs::is_empty(path) || fs::exists(fs::path(path) / "vocab.json"))))
    throw std::runtime_error("cannot write " + path + ": exists and is not a Marian model directory (choose another -o)");

  const auto [source, target] = checkpoint_tokenizers(checkpoint.meta);
  json vocab = json::object();
  for (int64_t id = 0; id < source.vocab_size(); ++id) vocab[source.id_to_piece(id)] = id;
  Transformer model = checkpoint.model;
  torch::NoGradGuard no_grad;
  const at::Tensor src_w = model->src_embedding->weight, tgt_w = model->tgt_embedding->weight,
                   out_w = model->fc_out->weight;
  const bool share = src_w.is_same(tgt_w) || torch::equal(src_w, tgt_w);
  const bool tie = out_w.is_same(tgt_w) || torch::equal(out_w, tgt_w);
  // torchmt column j -> Marian column: the inverse of to_torchmt_order.
  const auto order = torch::argsort(to_torchmt_order(c.d_model));
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  auto to_marian = [&](const std::string& name, const at::Tensor& value) {
    const int64_t dim = model_width_dim(name);
    return dim >= 0 ? value.index_select(dim, order) : value;
  };
  if (share) tensors.emplace_back("model.shared.weight", to_marian("src_embedding.weight", src_w));
  std::set<std::string> written;
  for (const auto& item : model->named_parameters()) {
    const std::string& name = item.key();
    if (name == "src_embedding.weight" || name == "tgt_embedding.weight") {
      if (!share) tensors.emplace_back(marian_name(name), to_marian(name, item.value()));
    } else if (name == "fc_out.weight") {
      if (!tie) tensors.emplace_back("lm_head.weight", to_marian(name, item.value()));
    } else if (name == "fc_out.bias") {
      tensors.emplace_back("final_logits_bias", item.value().reshape({1, -1}));
    } else {
      tensors.emplace_back(marian_name(name), to_marian(name, item.value()));
    }
  }
  json config = {
      {"architectures", {"MarianMTModel"}},
      {"model_type", "marian"},
      {"activation_function", activation_name(c.activation)},
      {"d_model", c.d_model},
      {"encoder_layers", c.num_encoder_layers},
      {"decoder_layers", c.num_decoder_layers},
      {"encoder_attention_heads", c.num_heads},
      {"decoder_attention_heads", c.num_heads},
      {"encoder_ffn_dim", c.d_ff},
      {"decoder_ffn_dim", c.d_ff},
      {"vocab_size", c.src_vocab_size},
      {"decoder_vocab_size", c.tgt_vocab_size},
      {"max_position_embeddings", c.max_positions},
      {"scale_embedding", c.scale_embeddings},
      {"share_encoder_decoder_embeddings", share},
      {"tie_word_embeddings", tie},
      {"dropout", c.dropout},
      {"attention_dropout", 0.0},
      {"activation_dropout", 0.0},
      {"pad_token_id", c.pad_id},
      {"eos_token_id", c.eos_id},
      {"forced_eos_token_id", c.eos_id},
      {"decoder_start_token_id", c.bos_id},
      {"is_encoder_decoder", true},
      {"static_position_embeddings", true},
      {"init_std", 0.02},
  };
  const json generation = {{"decoder_start_token_id", c.bos_id},
                           {"eos_token_id", c.eos_id},
                           {"pad_token_id", c.pad_id},
                           {"bad_words_ids", {{c.pad_id}}},
                           {"max_length", c.max_positions},
                           {"num_beams", 5}};
  // MarianTokenizer finds its special tokens by piece.
  json tokenizer = {{"eos_token", source.id_to_piece(c.eos_id)},
                          {"unk_token", source.id_to_piece(c.unk_id)},
                          {"pad_token", source.id_to_piece(c.pad_id)},
                          {"model_max_length", c.max_positions},
                          {"separate_vocabs", false},
                          {"tokenizer_class", "MarianTokenizer"}};
  for (const auto& [key, value] : language_fields(checkpoint.meta)) {
    config[key] = value;
    if (key == "source_language" || key == "target_language")
      tokenizer[key == "source_language" ? "source_lang" : "target_lang"] = value;  // MarianTokenizer's names
  }
  replace_directory(path, [&](const std::string& dir) {
    write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors, {{"format", "pt"}});
    atomic_write((fs::path(dir) / "config.json").string(), config.dump(2) + "\n");
    atomic_write((fs::path(dir) / "generation_config.json").string(), generation.dump(2) + "\n");
    atomic_write((fs::path(dir) / "tokenizer_config.json").string(), tokenizer.dump(2) + "\n");
    atomic_write((fs::path(dir) / "vocab.json").string(), vocab.dump(2) + "\n");
    write_sentencepiece_models(dir, source, target);
    write_language_identifier(dir, checkpoint.meta);
  });
}

}  // namespace torchmt
