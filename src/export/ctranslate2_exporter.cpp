#include "export/ctranslate2_exporter.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "torchmt/data/special_ids.h"
#include "torchmt/data/tokenizer.h"
#include "io/checkpoint.h"
#include "../kernels/primitives.h"
#include "util/atomic_file.h"

namespace torchmt {
namespace {

// CTranslate2's binary model format (version 6): little-endian, every variable as
// name, rank, dims (uint32), type id, byte count (uint32), bytes; then the aliases.
constexpr uint32_t kBinaryVersion = 6;
constexpr uint32_t kTransformerSpecRevision = 7;
// Type ids, in the order of CTranslate2's DataType enum.
enum class Ct2Type : uint8_t { kFloat32 = 0, kInt8 = 1, kInt16 = 2, kInt32 = 3, kFloat16 = 4, kBFloat16 = 5 };

class ModelBinWriter {
 public:
  void add(const std::string& name, const at::Tensor& value) {
    auto t = value.contiguous().cpu();
    Ct2Type type;
    switch (t.scalar_type()) {
      case at::kFloat: type = Ct2Type::kFloat32; break;
      case at::kChar: type = Ct2Type::kInt8; break;
      case at::kShort: type = Ct2Type::kInt16; break;
      case at::kInt: type = Ct2Type::kInt32; break;
      case at::kHalf: type = Ct2Type::kFloat16; break;
      case at::kBFloat16: type = Ct2Type::kBFloat16; break;
      default: throw std::invalid_argument("CTranslate2 has no type for " + name);
    }
    variables_.emplace_back(name, std::move(t), type);
  }
  void add_int8(const std::string& name, int8_t value) { add(name, torch::tensor({value}, torch::kChar).squeeze()); }
  void add_int16(const std::string& name, int16_t value) {
    add(name, torch::tensor({value}, torch::kShort).squeeze());
  }

  std::string bytes(const std::string& spec_name, uint32_t revision) const {
    std::string out;
    put_u32(out, kBinaryVersion);
    put_string(out, spec_name);
    put_u32(out, revision);
    put_u32(out, static_cast<uint32_t>(variables_.size()));
    for (const auto& [name, t, type] : variables_) {
      put_string(out, name);
      out.push_back(static_cast<char>(t.dim()));
      for (auto d : t.sizes()) put_u32(out, static_cast<uint32_t>(d));
      out.push_back(static_cast<char>(type));
      const auto size = static_cast<size_t>(t.numel()) * t.element_size();
      if (size > UINT32_MAX) throw std::invalid_argument("variable " + name + " is too large for CTranslate2's format");
      put_u32(out, static_cast<uint32_t>(size));
      out.append(static_cast<const char*>(t.data_ptr()), size);
    }
    put_u32(out, static_cast<uint32_t>(aliases_.size()));
    for (const auto& [alias, target] : aliases_) {
      put_string(out, alias);
      put_string(out, target);
    }
    return out;
  }
  // `name` reads `target`'s value (and, for an int8 weight, its weight_scale).
  void alias(const std::string& name, const std::string& target) { aliases_.emplace_back(name, target); }

 private:
  static void put_u32(std::string& out, uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  static void put_string(std::string& out, const std::string& s) {  // uint16 length incl. the NUL, bytes, NUL
    const auto n = static_cast<uint16_t>(s.size() + 1);
    out.push_back(static_cast<char>(n & 0xff));
    out.push_back(static_cast<char>(n >> 8));
    out += s;
    out.push_back('\0');
  }
  std::vector<std::tuple<std::string, at::Tensor, Ct2Type>> variables_;
  std::vector<std::pair<std::string, std::string>> aliases_;
};

struct Writer {
  ModelBinWriter bin;
  const ExportOptions& options;
  at::Tensor floating(const at::Tensor& t) const { return t.detach().to(options.dtype); }
  // A weight that CTranslate2 may quantize (Linear and Embeddings weights). Tied weights
  // (one tensor under several scopes) are written once, under the first scope by name, and
  // aliased elsewhere, as CTranslate2's converter does (an alias of an int8 weight shares its
  // scale, so a copy would carry a scale the format does not expect).
  void weight(const std::string& scope, const at::Tensor& w) { pending_weights.emplace_back(scope, w); }
  void write_weights() {
    std::map<const void*, std::vector<std::pair<std::string, at::Tensor>>> tied;
    for (const auto& [scope, w] : pending_weights) tied[w.data_ptr()].emplace_back(scope, w);
    for (auto& [data, scopes] : tied) {
      std::sort(scopes.begin(), scopes.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      write_weight(scopes.front().first, scopes.front().second);
      for (size_t i = 1; i < scopes.size(); ++i) bin.alias(scopes[i].first + "/weight", scopes.front().first + "/weight");
    }
    pending_weights.clear();
  }
  std::vector<std::pair<std::string, at::Tensor>> pending_weights;
  void linear(const std::string& scope, const std::vector<torch::nn::Linear>& parts) {
    std::vector<at::Tensor> weights, biases;
    for (const auto& p : parts) {
      weights.push_back(p->weight);
      biases.push_back(p->bias);
    }
    // [sum out, in]: CTranslate2 fuses q|k|v and k|v; a single weight stays itself (tied?).
    weight(scope, weights.size() == 1 ? weights.front() : torch::cat(weights, 0));
    bin.add(scope + "/bias", floating(torch::cat(biases, 0)));
  }
  void layer_norm(const std::string& scope, const torch::nn::LayerNorm& norm) {
    bin.add(scope + "/gamma", floating(norm->weight));
    bin.add(scope + "/beta", floating(norm->bias));
  }

 private:
  void write_weight(const std::string& scope, const at::Tensor& w) {
    if (options.quantize_int8) {
      auto [q, scale] = kernels::quantize_rows_int8(w.detach());
      bin.add(scope + "/weight", q);
      bin.add(scope + "/weight_scale", scale);
    } else {
      bin.add(scope + "/weight", floating(w));
    }
  }
};

std::string vocabulary_json(const Tokenizer& tokenizer) {
  nlohmann::json pieces = nlohmann::json::array();
  for (int64_t id = 0; id < tokenizer.vocab_size(); ++id) pieces.push_back(tokenizer.id_to_piece(id));
  return pieces.dump(2) + "\n";
}

bool is_ctranslate2_directory(const std::filesystem::path& dir) {
  return std::filesystem::is_regular_file(dir / "model.bin") && std::filesystem::is_regular_file(dir / "config.json");
}

}  // namespace

void CTranslate2Exporter::write(const LoadedCheckpoint& checkpoint, const ExportOptions& options,
                                const std::string& path) {
  namespace fs = std::filesystem;
  const ModelConfig& c = checkpoint.meta.model;
  Transformer model = checkpoint.model;  // a handle: ModuleList access is non-const
  if (!model) throw std::invalid_argument("no model to export");
  if (c.d_model % c.num_heads != 0)
    throw std::invalid_argument("CTranslate2 export: d_model must be a multiple of num_heads");
  // CTranslate2's TransformerSpec expresses the paper's model and the modern switches (its
  // pre_norm with final LayerNorms, rotary embeddings, num_heads_kv); it has no mixture of
  // experts for encoder-decoder models: refused rather than exported wrong.
  if (c.ffn != Ffn::kDense)
    throw std::invalid_argument("CTranslate2 export: CTranslate2 has no mixture-of-experts feed-forward for "
                                "encoder-decoder models (this model has ffn " + ffn_name(c.ffn) +
                                "; use --format torchscript)");
  if (checkpoint.meta.src_spm_model.empty())
    throw std::invalid_argument("CTranslate2 export: the checkpoint carries no SentencePiece model");
  std::error_code ec;
  if (fs::exists(path, ec) && !(fs::is_directory(path, ec) && (fs::is_empty(path, ec) || is_ctranslate2_directory(path))))
    throw std::runtime_error("cannot write " + path +
                             ": exists and is not a CTranslate2 model directory (choose another -o)");

  torch::NoGradGuard no_grad;
  Writer w{ModelBinWriter{}, options, {}};
  auto& bin = w.bin;
  const bool pre_norm = c.norm == Norm::kPre, rope = c.positions == Positions::kRope;
  const int64_t kv_heads = c.key_value_heads();
  // Sinusoidal or learned: torchmt's table as it is. Rotary: the decoder has none, and
  // CTranslate2's encoder always adds one, so it gets zeros.
  const at::Tensor pe = rope ? torch::zeros({c.max_positions, c.d_model})
                             : model->pos_encoding->pe.squeeze(0);  // [L, D]
  // CTranslate2: RELU 0, SWISH 2, GELU 3 (erf)
  const int8_t activation = c.activation == Activation::kGELU ? 3 : c.activation == Activation::kSwish ? 2 : 0;

  // An attention block's own settings, as CTranslate2's MultiHeadAttentionSpec writes them:
  // grouped-query K/V heads, and rotary embeddings on the whole head (self-attention only)
  // with rotate_half's layout (dimension j pairs with j + d_k/2: not interleaved).
  auto attention_settings = [&](const std::string& scope, bool self) {
    if (kv_heads != c.num_heads)
      bin.add(scope + "/num_heads_kv", torch::tensor({static_cast<int32_t>(kv_heads)}, torch::kInt).squeeze());
    if (self && rope) {
      bin.add(scope + "/rotary_base", torch::tensor({10000.0f}, torch::kFloat).squeeze());
      bin.add(scope + "/rotary_dim", torch::tensor({0}, torch::kInt).squeeze());  // 0: the whole head
      bin.add_int8(scope + "/rotary_interleave", 0);
    }
  };
  // Self-attention (q|k|v fused, then the output projection) and the feed-forward block, the same
  // in encoder and decoder layers. Each block's LayerNorm: after it (post-norm) or before it
  // (Pre-LN); CTranslate2 names it the same either way.
  auto self_attention = [&](const std::string& s, const MultiHeadAttention& a, const torch::nn::LayerNorm& norm) {
    w.linear(s + "/self_attention/linear_0", {a->W_q, a->W_k, a->W_v});
    w.linear(s + "/self_attention/linear_1", {a->W_o});
    w.layer_norm(s + "/self_attention/layer_norm", norm);
    attention_settings(s + "/self_attention", true);
  };
  auto feed_forward = [&](const std::string& s, const FeedForward& ffn, const torch::nn::LayerNorm& norm) {
    w.linear(s + "/ffn/linear_0", {ffn->linear1});
    w.linear(s + "/ffn/linear_1", {ffn->linear2});
    w.layer_norm(s + "/ffn/layer_norm", norm);
  };

  bin.add_int8("encoder/activation", activation);
  w.weight("encoder/embeddings_0", model->src_embedding->weight);
  bin.add_int8("encoder/embeddings_merge", 0);
  for (int64_t i = 0; i < c.num_encoder_layers; ++i) {
    const auto& layer = model->encoder_layers[i]->as<TransformerEncoderLayer>();
    const std::string s = "encoder/layer_" + std::to_string(i);
    self_attention(s, layer->self_attn, layer->norm1);
    feed_forward(s, layer->ffn.dense, layer->norm2);
  }
  if (pre_norm) w.layer_norm("encoder/layer_norm", model->encoder_norm);
  bin.add_int8("encoder/multi_query_attention", 0);
  bin.add_int16("encoder/num_heads", static_cast<int16_t>(c.num_heads));
  bin.add("encoder/position_encodings/encodings", w.floating(pe));
  bin.add_int8("encoder/pre_norm", pre_norm ? 1 : 0);
  bin.add_int8("encoder/scale_embeddings", c.scale_embeddings ? 1 : 0);

  bin.add_int8("decoder/activation", activation);
  bin.add_int8("decoder/alibi", 0);
  bin.add_int8("decoder/alibi_use_positive_positions", 0);
  bin.add_int16("decoder/alignment_heads", 1);
  bin.add_int16("decoder/alignment_layer", -1);
  w.weight("decoder/embeddings", model->tgt_embedding->weight);
  for (int64_t i = 0; i < c.num_decoder_layers; ++i) {
    const auto& layer = model->decoder_layers[i]->as<TransformerDecoderLayer>();
    const std::string s = "decoder/layer_" + std::to_string(i);
    self_attention(s, layer->self_attn, layer->norm1);
    w.linear(s + "/attention/linear_0", {layer->cross_attn->W_q});
    w.linear(s + "/attention/linear_1", {layer->cross_attn->W_k, layer->cross_attn->W_v});
    w.linear(s + "/attention/linear_2", {layer->cross_attn->W_o});
    w.layer_norm(s + "/attention/layer_norm", layer->norm2);
    attention_settings(s + "/attention", false);
    feed_forward(s, layer->ffn.dense, layer->norm3);
  }
  if (pre_norm) w.layer_norm("decoder/layer_norm", model->decoder_norm);
  bin.add_int16("decoder/num_heads", static_cast<int16_t>(c.num_heads));
  if (!rope) bin.add("decoder/position_encodings/encodings", w.floating(pe));
  bin.add_int8("decoder/pre_norm", pre_norm ? 1 : 0);
  w.linear("decoder/projection", {model->fc_out});
  bin.add_int8("decoder/scale_alibi", 0);
  bin.add_int8("decoder/scale_embeddings", c.scale_embeddings ? 1 : 0);
  bin.add_int8("decoder/start_from_zero_embedding", 0);

  const auto [source, target_tokenizer] = checkpoint_tokenizers(checkpoint.meta);
  // One vocabulary file when the ids are one vocabulary's (an explicit one is shared by design).
  const bool shared = !checkpoint.meta.vocabulary.empty() || checkpoint.meta.tgt_spm_model.empty() ||
                      checkpoint.meta.tgt_spm_model == checkpoint.meta.src_spm_model;
  nlohmann::json config = {
      {"add_source_bos", false},
      {"add_source_eos", true},  // torchmt's sources end with </s>, which CTranslate2 then appends itself
      {"bos_token", source.id_to_piece(c.bos_id)},
      {"decoder_start_token", source.id_to_piece(c.bos_id)},
      {"eos_token", source.id_to_piece(c.eos_id)},
      {"layer_norm_epsilon", 1e-5},
      {"multi_query_attention", false},  // as CTranslate2 writes it (the heads are in num_heads_kv)
      {"unk_token", source.id_to_piece(c.unk_id)},
  };

  for (const auto& [key, value] : language_fields(checkpoint.meta)) config[key] = value;
  // Everything goes to a fresh directory beside the target, which then takes its place.
  replace_directory(path, [&](const std::string& dir) {
    w.write_weights();
    atomic_write((fs::path(dir) / "model.bin").string(), bin.bytes("TransformerSpec", kTransformerSpecRevision));
    atomic_write((fs::path(dir) / "config.json").string(), config.dump(2) + "\n");
    write_language_identifier(dir, checkpoint.meta);
    if (shared) {
      atomic_write((fs::path(dir) / "shared_vocabulary.json").string(), vocabulary_json(source));
    } else {
      atomic_write((fs::path(dir) / "source_vocabulary.json").string(), vocabulary_json(source));
      atomic_write((fs::path(dir) / "target_vocabulary.json").string(), vocabulary_json(target_tokenizer));
    }
    write_sentencepiece_models(dir, source, target_tokenizer);
  });
}

}  // namespace torchmt
