#include "torchmt/model/model_config.h"

#include <functional>
#include <set>
#include <stdexcept>
#include <utility>

#include "torchmt/util/option_table.h"
#include "torchmt/util/strings.h"

namespace torchmt {

namespace {

// Every value of each switch with its name: parse_*, *_name and model_variants() read these, so a
// new value is named, parsed and exported-tested once it has its row.
template <typename E>
struct Named {
  E value;
  const char* name;
};
constexpr Named<Activation> kActivations[] = {
    {Activation::kReLU, "relu"}, {Activation::kGELU, "gelu"}, {Activation::kSwish, "swish"}};
constexpr Named<Norm> kNorms[] = {{Norm::kPost, "post"}, {Norm::kPre, "pre"}};
constexpr Named<Positions> kPositions[] = {
    {Positions::kSinusoidal, "sinusoidal"}, {Positions::kLearned, "learned"}, {Positions::kRope, "rope"}};
constexpr Named<Ffn> kFfns[] = {{Ffn::kDense, "dense"}, {Ffn::kMoe, "moe"}};

template <typename E, size_t N>
E parse_named(const Named<E> (&table)[N], const std::string& what, const std::string& name) {
  for (const auto& row : table)
    if (name == row.name) return row.value;
  std::string choices;
  for (size_t i = 0; i < N; ++i) choices += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + table[i].name;
  throw std::invalid_argument(what + " must be " + choices + ", got '" + escape_control(name) + "'");
}

template <typename E, size_t N>
std::string name_of(const Named<E> (&table)[N], E value) {
  for (const auto& row : table)
    if (row.value == value) return row.name;
  return table[0].name;
}

}  // namespace

Activation parse_activation(const std::string& name) { return parse_named(kActivations, "activation", name); }
std::string activation_name(Activation activation) { return name_of(kActivations, activation); }
Norm parse_norm(const std::string& name) { return parse_named(kNorms, "norm", name); }
std::string norm_name(Norm norm) { return name_of(kNorms, norm); }
Positions parse_positions(const std::string& name) { return parse_named(kPositions, "positions", name); }
std::string positions_name(Positions positions) { return name_of(kPositions, positions); }
Ffn parse_ffn(const std::string& name) { return parse_named(kFfns, "ffn", name); }
std::string ffn_name(Ffn ffn) { return name_of(kFfns, ffn); }

std::vector<ModelVariant> model_variants(const ModelConfig& base) {
  std::vector<ModelVariant> out;
  auto add = [&](const std::string& name, const std::function<void(ModelConfig&)>& change) {
    ModelConfig c = base;
    change(c);
    out.push_back({name, c});
  };
  for (const auto& row : kActivations)
    if (row.value != base.activation) add(std::string("activation=") + row.name, [&](ModelConfig& c) { c.activation = row.value; });
  for (const auto& row : kNorms)
    if (row.value != base.norm) add(std::string("norm=") + row.name, [&](ModelConfig& c) { c.norm = row.value; });
  for (const auto& row : kPositions)
    if (row.value != base.positions) add(std::string("positions=") + row.name, [&](ModelConfig& c) { c.positions = row.value; });
  for (const auto& row : kFfns)
    if (row.value != base.ffn)
      add(std::string("ffn=") + row.name, [&](ModelConfig& c) {
        c.ffn = row.value;
        c.experts = 3;  // an odd number of experts, two per token: routing that a slip would show
        c.top_k = 2;
      });
  add("kv_heads=1", [](ModelConfig& c) { c.kv_heads = 1; });
  if (base.num_heads % 2 == 0 && base.num_heads > 2) add("kv_heads=2", [](ModelConfig& c) { c.kv_heads = 2; });
  add(base.tie_embeddings ? "tie_embeddings=false" : "tie_embeddings=true",
      [](ModelConfig& c) { c.tie_embeddings = !c.tie_embeddings; });
  add(base.scale_embeddings ? "scale_embeddings=false" : "scale_embeddings=true",
      [](ModelConfig& c) { c.scale_embeddings = !c.scale_embeddings; });
  // The modern preset's switches together (as users train them).
  add("modern", [](ModelConfig& c) {
    c.norm = Norm::kPre;
    c.positions = Positions::kRope;
    c.kv_heads = c.num_heads % 2 == 0 ? c.num_heads / 2 : 1;
    c.tie_embeddings = true;
  });
  return out;
}

ModelConfig ModelConfig::preset(const std::string& name) {
  static const std::string kModern = "modern-";
  if (name.rfind(kModern, 0) == 0) {
    const std::string size = name.substr(kModern.size());
    if (size != "small" && size != "base")
      throw std::invalid_argument("unknown model preset '" + escape_control(name) + "' (modern-small or modern-base)");
    ModelConfig c = preset(size);
    c.norm = Norm::kPre;
    c.positions = Positions::kRope;
    c.kv_heads = c.num_heads / 2;  // half the heads' K/V: the KV cache halves
    return c;
  }
  ModelConfig c;
  if (name == "base" || name == "paper-base") {
    // Paper defaults (the struct's own defaults).
  } else if (name == "big") {
    c.d_model = 1024; c.num_heads = 16; c.d_ff = 4096; c.dropout = 0.3;
  } else if (name == "small" || name == "paper-small") {
    c.d_model = 256; c.num_heads = 4; c.num_encoder_layers = 3; c.num_decoder_layers = 3;
    c.d_ff = 1024; c.dropout = 0.1; c.tie_embeddings = true;
  } else if (name == "tiny") {
    c.d_model = 64; c.num_heads = 4; c.num_encoder_layers = 2; c.num_decoder_layers = 2;
    c.d_ff = 128; c.dropout = 0.0; c.max_positions = 256;
  } else {
    throw std::invalid_argument("unknown model preset '" + escape_control(name) + "' (expected tiny, small, base, big, paper-small, paper-base, modern-small or modern-base)");
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
  require(max_positions > 0, "max_positions must be positive");
  require(!tie_embeddings || src_vocab_size == tgt_vocab_size,
          "tied embeddings need one joint vocabulary (src and tgt sizes differ)");
  const int64_t vocab = std::min(src_vocab_size, tgt_vocab_size);
  for (const auto& [name, id] : {std::pair<const char*, int64_t>{"pad_id", pad_id}, {"unk_id", unk_id},
                                 {"bos_id", bos_id}, {"eos_id", eos_id}})
    require(id >= 0 && id < vocab, std::string(name) + " " + std::to_string(id) + " outside the vocabulary of " +
                                       std::to_string(vocab));
  require(eos_id != pad_id && eos_id != bos_id, "eos_id must differ from pad_id and bos_id");
  require(kv_heads >= 0 && kv_heads <= num_heads && num_heads % key_value_heads() == 0,
          "kv_heads (" + std::to_string(kv_heads) + ") must divide num_heads (" + std::to_string(num_heads) +
              "); 0 = num_heads");
  require(ffn == Ffn::kDense || (experts >= 1 && top_k >= 1 && top_k <= experts),
          "a mixture of experts needs experts >= 1 and 1 <= top_k <= experts (experts " + std::to_string(experts) +
              ", top_k " + std::to_string(top_k) + ")");
  require(positions != Positions::kRope || (d_model / num_heads) % 2 == 0,
          "rotary positions need an even head width (d_model / num_heads = " + std::to_string(d_model / num_heads) + ")");
}

namespace {

const OptionTable<ModelConfig>& model_config_table() {
  using C = ModelConfig;
  static const auto table = OptionTable<C>("model")
      .add("src_vocab_size", &C::src_vocab_size, "source vocabulary size")
      .add("tgt_vocab_size", &C::tgt_vocab_size, "target vocabulary size")
      .add("d_model", &C::d_model, "model (embedding) width")
      .add("num_heads", &C::num_heads, "attention heads")
      .add("num_encoder_layers", &C::num_encoder_layers, "encoder layers")
      .add("num_decoder_layers", &C::num_decoder_layers, "decoder layers")
      .add("d_ff", &C::d_ff, "feed-forward width")
      .add("dropout", &C::dropout, "dropout probability")
      .add("max_positions", &C::max_positions, "rows of the positional table: the longest sequence accepted",
           {"", "", {"max_len"}})
      .add_custom(
         "activation", OptionKind::kText, "feed-forward activation: relu|gelu|swish",
         [](C& c, const std::string& v) { c.activation = parse_activation(v); },
         [](const C& c) { return activation_name(c.activation); })
      .add("tie_embeddings", &C::tie_embeddings, "share source, target and output embeddings")
      .add("pad_id", &C::pad_id, "padding token id")
      .add("unk_id", &C::unk_id, "unknown-piece token id")
      .add("bos_id", &C::bos_id, "the decoder's start token id")
      .add("eos_id", &C::eos_id, "end-of-sentence token id")
      .add("scale_embeddings", &C::scale_embeddings, "multiply embeddings by sqrt(d_model)")
      .add_custom(
         "norm", OptionKind::kText, "layer norm placement: post (paper) | pre (Pre-LN)",
         [](C& c, const std::string& v) { c.norm = parse_norm(v); }, [](const C& c) { return norm_name(c.norm); })
      .add_custom(
         "positions", OptionKind::kText, "positions: sinusoidal (paper) | learned | rope",
         [](C& c, const std::string& v) { c.positions = parse_positions(v); },
         [](const C& c) { return positions_name(c.positions); })
      .add("kv_heads", &C::kv_heads, "key/value heads (grouped-query attention; 0 = num_heads, 1 = multi-query)")
      .add_custom(
         "ffn", OptionKind::kText, "feed-forward: dense (paper) | moe (mixture of experts)",
         [](C& c, const std::string& v) { c.ffn = parse_ffn(v); }, [](const C& c) { return ffn_name(c.ffn); })
      .add("experts", &C::experts, "experts per layer (ffn: moe)")
      .add("top_k", &C::top_k, "experts each token uses (ffn: moe)")
      .add("checkpoint_activations", &C::checkpoint_activations,
           "recompute each layer's activations in backward instead of keeping them (training)");
  return table;
}

}  // namespace

std::string ModelConfig::to_json() const { return model_config_table().write(*this).to_json(); }

std::string ModelConfig::shape_differences(const ModelConfig& other) const {
  const auto mine = model_config_table().write(*this).values();
  const auto theirs = model_config_table().write(other).values();
  std::string out;
  for (const auto& [key, value] : mine) {
    if (key == "dropout" || key == "checkpoint_activations") continue;
    const auto it = theirs.find(key);
    const std::string& that = it == theirs.end() ? std::string() : it->second;
    if (value != that) out += (out.empty() ? "" : ", ") + key + " " + value + " against " + that;
  }
  return out;
}

ModelConfig ModelConfig::from_json(const std::string& json) {
  const FlatConfig f = FlatConfig::parse(json);
  const auto& table = model_config_table();
  // Fields added after 0.2: absent in older files, where they were the paper's.
  static const std::set<std::string> kLater = {"norm", "positions", "kv_heads", "ffn", "experts", "top_k", "checkpoint_activations",
                                              "unk_id", "bos_id", "eos_id", "scale_embeddings"};
  for (const auto& row : table.rows()) {
    if (kLater.count(row.key)) continue;
    bool present = f.has(row.key);
    for (const auto& old : row.old_keys) present = present || f.has(old);
    if (!present) throw std::invalid_argument("model configuration lacks '" + row.key + "'");
  }
  ModelConfig c = table.read(f, ModelConfig{}, /*warn_old_keys=*/false);
  c.validate();
  return c;
}

}  // namespace torchmt
