#include "torchmt/training/train_options.h"

#include <functional>
#include <map>
#include <stdexcept>

namespace torchmt {
namespace {

// One table drives reading, writing and the unknown-key check, so the three never drift.
struct Field {
  std::function<void(TrainOptions&, const FlatConfig&, const std::string&)> read;
  std::function<std::string(const TrainOptions&)> write;
};

template <typename T>
std::string to_text(const T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    return v;
  } else if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else {
    std::string s = std::to_string(v);
    if constexpr (std::is_floating_point_v<T>) {
      s.erase(s.find_last_not_of('0') + 1);
      if (!s.empty() && s.back() == '.') s.pop_back();
    }
    return s;
  }
}

template <typename T>
Field field(T TrainOptions::*member) {
  Field f;
  f.read = [member](TrainOptions& o, const FlatConfig& c, const std::string& key) {
    if constexpr (std::is_same_v<T, std::string>) {
      o.*member = c.get(key);
    } else if constexpr (std::is_same_v<T, bool>) {
      o.*member = c.get_bool(key);
    } else if constexpr (std::is_floating_point_v<T>) {
      o.*member = c.get_double(key);
    } else {
      o.*member = static_cast<T>(c.get_int(key));
    }
  };
  f.write = [member](const TrainOptions& o) { return to_text(o.*member); };
  return f;
}

const std::map<std::string, Field>& fields() {
  static const std::map<std::string, Field> table = {
      {"train_src", field(&TrainOptions::train_src)},
      {"train_tgt", field(&TrainOptions::train_tgt)},
      {"valid_src", field(&TrainOptions::valid_src)},
      {"valid_tgt", field(&TrainOptions::valid_tgt)},
      {"spm", field(&TrainOptions::spm)},
      {"vocab_size", field(&TrainOptions::vocab_size)},
      {"max_len", field(&TrainOptions::max_len)},
      {"preset", field(&TrainOptions::preset)},
      {"d_model", field(&TrainOptions::d_model)},
      {"num_heads", field(&TrainOptions::num_heads)},
      {"encoder_layers", field(&TrainOptions::encoder_layers)},
      {"decoder_layers", field(&TrainOptions::decoder_layers)},
      {"d_ff", field(&TrainOptions::d_ff)},
      {"dropout", field(&TrainOptions::dropout)},
      {"activation", field(&TrainOptions::activation)},
      {"tie_embeddings", field(&TrainOptions::tie_embeddings)},
      {"max_tokens", field(&TrainOptions::max_tokens)},
      {"update_freq", field(&TrainOptions::update_freq)},
      {"max_epochs", field(&TrainOptions::max_epochs)},
      {"max_steps", field(&TrainOptions::max_steps)},
      {"max_minutes", field(&TrainOptions::max_minutes)},
      {"lr_factor", field(&TrainOptions::lr_factor)},
      {"warmup", field(&TrainOptions::warmup)},
      {"label_smoothing", field(&TrainOptions::label_smoothing)},
      {"clip_norm", field(&TrainOptions::clip_norm)},
      {"max_bad_steps", field(&TrainOptions::max_bad_steps)},
      {"seed", field(&TrainOptions::seed)},
      {"device", field(&TrainOptions::device)},
      {"dtype", field(&TrainOptions::dtype)},
      {"threads", field(&TrainOptions::threads)},
      {"out", field(&TrainOptions::out)},
      {"resume", field(&TrainOptions::resume)},
      {"validate_every", field(&TrainOptions::validate_every)},
      {"log_every", field(&TrainOptions::log_every)},
      {"keep_last", field(&TrainOptions::keep_last)},
      {"valid_batch_size", field(&TrainOptions::valid_batch_size)},
  };
  return table;
}

}  // namespace

TrainOptions TrainOptions::from_config(const FlatConfig& config) {
  TrainOptions o;
  for (const auto& [key, value] : config.values()) {
    auto it = fields().find(key);
    if (it == fields().end()) throw std::invalid_argument("unknown training option '" + key + "'");
    it->second.read(o, config, key);
  }
  o.validate();
  return o;
}

FlatConfig TrainOptions::to_config() const {
  FlatConfig c;
  for (const auto& [key, f] : fields()) c.set(key, f.write(*this));
  return c;
}

void TrainOptions::validate() const {
  auto require = [](bool ok, const std::string& msg) {
    if (!ok) throw std::invalid_argument(msg);
  };
  require(!train_src.empty() && !train_tgt.empty(), "--train-src and --train-tgt are required");
  require(valid_src.empty() == valid_tgt.empty(), "--valid-src and --valid-tgt go together");
  require(vocab_size >= 16, "--vocab-size must be at least 16");
  require(max_tokens > 0, "--max-tokens must be positive");
  require(update_freq >= 1, "--update-freq must be at least 1");
  require(max_epochs >= 0 && max_steps >= 0 && max_minutes >= 0, "limits must not be negative");
  require(lr_factor > 0 && warmup > 0, "--lr-factor and --warmup must be positive");
  require(label_smoothing >= 0 && label_smoothing < 1, "--label-smoothing must be in [0, 1)");
  require(clip_norm >= 0, "--clip-norm must not be negative");
  require(tie_embeddings == "auto" || tie_embeddings == "true" || tie_embeddings == "false",
          "--tie-embeddings must be auto, true or false");
  require(keep_last >= 0 && log_every >= 1 && validate_every >= 0, "invalid logging/checkpoint interval");
  require(!out.empty(), "--out must name a run directory");
}

}  // namespace torchmt
