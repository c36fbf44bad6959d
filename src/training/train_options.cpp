#include "torchmt/training/train_options.h"

#include <stdexcept>

namespace torchmt {

const OptionTable<TrainOptions>& train_option_table() {
  static const OptionTable<TrainOptions> table = [] {
    using O = TrainOptions;
    OptionTable<O> t("training");
    const OptionExtra data{"", "data", {}}, model{"", "model", {}}, optim{"", "optimisation", {}},
        run{"", "run", {}};
    t.add("train_src", &O::train_src, "training source file (plain or .gz)", data);
    t.add("train_tgt", &O::train_tgt, "training target file", data);
    t.add("valid_src", &O::valid_src, "validation source file", data);
    t.add("valid_tgt", &O::valid_tgt, "validation target file", data);
    t.add("spm", &O::spm, "existing joint SentencePiece model (default: train one into the run directory)", data);
    t.add("vocab_size", &O::vocab_size, "BPE vocabulary size when training one", data);
    t.add("max_sentence_tokens", &O::max_sentence_tokens,
          "skip a training pair when a side has more tokens than this (eos included); nothing is truncated",
          {"", "data", {"max_len"}});
    t.add("preset", &O::preset, "model preset: tiny|small|base|big", model);
    t.add("d_model", &O::d_model, "override the preset's d_model (-1 = keep)", model);
    t.add("num_heads", &O::num_heads, "override the number of attention heads (-1 = keep)", model);
    t.add("encoder_layers", &O::encoder_layers, "override the encoder layers (-1 = keep)", model);
    t.add("decoder_layers", &O::decoder_layers, "override the decoder layers (-1 = keep)", model);
    t.add("d_ff", &O::d_ff, "override the feed-forward width (-1 = keep)", model);
    t.add("dropout", &O::dropout, "override the dropout (-1 = keep)", model);
    t.add("activation", &O::activation, "override the activation: relu|gelu", model);
    t.add("tie_embeddings", &O::tie_embeddings, "auto|true|false (auto: the preset's choice)", model);
    t.add("batch_tokens", &O::batch_tokens,
          "tokens per batch: rows x (longest source + longest target), padding included",
          {"", "optimisation", {"max_tokens"}});
    t.add("update_freq", &O::update_freq, "accumulate gradients over N batches per update", optim);
    t.add("max_epochs", &O::max_epochs, "stop after N epochs (0 = no limit)", optim);
    t.add("max_steps", &O::max_steps, "stop after N updates (0 = no limit)", optim);
    t.add("max_minutes", &O::max_minutes, "stop after N minutes of training (0 = no limit)", optim);
    t.add("lr_factor", &O::lr_factor, "factor of the paper's learning-rate schedule", optim);
    t.add("warmup", &O::warmup, "warm-up steps of the schedule", optim);
    t.add("label_smoothing", &O::label_smoothing, "label smoothing epsilon", optim);
    t.add("clip_norm", &O::clip_norm, "gradient clipping max norm (0 = off)", optim);
    t.add("max_bad_steps", &O::max_bad_steps, "non-finite steps in a row before stopping", optim);
    t.add("seed", &O::seed, "random seed", optim);
    t.add("device", &O::device, "auto|cpu|cuda|cuda:N", run);
    t.add("dtype", &O::dtype, "auto|fp32|bf16 (auto: bf16 where the hardware computes it natively)", run);
    t.add("threads", &O::threads, "CPU threads (0 = all cores)", run);
    t.add("out", &O::out, "run directory", run);
    t.add("resume", &O::resume, "continue RUN_DIR/checkpoint_last.pt exactly", run);
    t.add("validate_every", &O::validate_every, "validate every N steps (0 = every epoch)", run);
    t.add("log_every", &O::log_every, "steps between log lines when stderr is not a terminal", run);
    t.add("keep_last", &O::keep_last, "numbered checkpoints to keep", run);
    t.add("valid_batch_size", &O::valid_batch_size, "sentences per batch when translating the validation set", run);
    return t;
  }();
  return table;
}

TrainOptions TrainOptions::from_config(const FlatConfig& config) {
  TrainOptions o = train_option_table().read(config);
  o.validate();
  return o;
}

FlatConfig TrainOptions::to_config() const { return train_option_table().write(*this); }

void TrainOptions::validate() const {
  auto require = [](bool ok, const std::string& msg) {
    if (!ok) throw std::invalid_argument(msg);
  };
  require(!train_src.empty() && !train_tgt.empty(), "--train-src and --train-tgt are required");
  require(valid_src.empty() == valid_tgt.empty(), "--valid-src and --valid-tgt go together");
  require(vocab_size >= 16, "--vocab-size must be at least 16");
  require(batch_tokens > 0, "--batch-tokens must be positive");
  require(max_sentence_tokens >= 2, "--max-sentence-tokens must be at least 2");
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
