#include "torchmt/training/train_options.h"

#include "torchmt/data/language_identifier.h"
#include "torchmt/training/train_recipes.h"
#include "torchmt/util/device.h"
#include "util/thread_team.h"

#include <cmath>
#include <stdexcept>

namespace torchmt {

const OptionTable<TrainOptions>& train_option_table() {
  using O = TrainOptions;
  const OptionExtra data{"", "data", {}}, model{"", "model", {}}, optim{"", "optimisation", {}},
      run{"", "run", {}}, dist{"", "distributed", {}};
  static const auto table = OptionTable<O>("training")
      .add("train_src", &O::train_src, "training source file (plain or .gz)", data)
      .add("train_tgt", &O::train_tgt, "training target file", data)
      .add("train_data", &O::train_data,
           "instead of --train-src/--train-tgt: a dataset from `torchmt preprocess`, or a YAML file listing corpora "
           "({name, src, tgt | data, weight}) to mix",
           data)
      .add("shuffle_window", &O::shuffle_window,
           "pairs shuffled, then sorted by length and batched together (0 = the whole epoch; memory grows with it)",
           data)
      .add("both_directions", &O::both_directions,
           "also train on every training pair reversed (target -> source): one model translates both ways "
           "(needs one joint vocabulary; validation stays source -> target)",
           data)
      .add("valid_src", &O::valid_src, "validation source file", data)
      .add("valid_tgt", &O::valid_tgt, "validation target file", data)
      .add("source_language", &O::source_language,
           "the source language's code, recorded in the checkpoints (default: the --train-src suffix, e.g. .de)", data)
      .add("target_language", &O::target_language, "the target language's code (default: the --train-tgt suffix)", data)
      .add("spm", &O::spm, "existing joint SentencePiece model (default: train one into the run directory)", data)
      .add("vocab_size", &O::vocab_size, "BPE vocabulary size when training one", data)
      .add("max_sentence_tokens", &O::max_sentence_tokens,
           "skip a training pair when a side has more tokens than this (eos included); nothing is truncated",
           {"", "data", {"max_len"}})
      .add("recipe", &O::recipe,
           "a named recipe that sets model and optimisation defaults (flags override): " + recipe_names(), model)
      .add("preset", &O::preset, "model preset: tiny|small|base|big|paper-small|paper-base|modern-small|modern-base", model)
      .add("d_model", &O::d_model, "override the preset's d_model (-1 = keep)", model)
      .add("num_heads", &O::num_heads, "override the number of attention heads (-1 = keep)", model)
      .add("encoder_layers", &O::encoder_layers, "override the encoder layers (-1 = keep)", model)
      .add("decoder_layers", &O::decoder_layers, "override the decoder layers (-1 = keep)", model)
      .add("d_ff", &O::d_ff, "override the feed-forward width (-1 = keep)", model)
      .add("dropout", &O::dropout, "override the dropout (-1 = keep)", model)
      .add("activation", &O::activation, "override the activation: relu|gelu|swish", model)
      .add("tie_embeddings", &O::tie_embeddings, "auto|true|false (auto: the preset's choice)", model)
      .add("norm", &O::norm, "override the layer norm placement: post (paper) | pre (Pre-LN)", model)
      .add("positions", &O::positions, "override the positions: sinusoidal | learned | rope", model)
      .add("kv_heads", &O::kv_heads,
           "override the key/value heads: grouped-query attention (-1 = keep, 0 = num_heads, 1 = multi-query)", model)
      .add("ffn", &O::ffn, "override the feed-forward: dense | moe (mixture of experts)", model)
      .add("experts", &O::experts, "experts per layer with --ffn moe (-1 = keep: 4)", model)
      .add("top_k", &O::top_k, "experts per token with --ffn moe (-1 = keep: 2)", model)
      .add("checkpoint_activations", &O::checkpoint_activations,
           "true|false: recompute each layer's activations in backward (less memory, ~1/3 more compute)", model)
      .add("moe_aux_loss", &O::moe_aux_loss, "weight of the mixture of experts' load-balancing loss", optim)
      .add("batch_tokens", &O::batch_tokens,
           "tokens per batch: rows x (longest source + longest target), padding included",
           {"", "optimisation", {"max_tokens"}})
      .add("update_freq", &O::update_freq, "accumulate gradients over N batches per update", optim)
      .add("max_epochs", &O::max_epochs, "stop after N epochs (0 = no limit)", optim)
      .add("max_steps", &O::max_steps, "stop after N updates (0 = no limit)", optim)
      .add("max_minutes", &O::max_minutes, "stop after N minutes of training (0 = no limit)", optim)
      .add("lr_factor", &O::lr_factor, "factor of the paper's learning-rate schedule", optim)
      .add("warmup", &O::warmup, "warm-up steps of the schedule", optim)
      .add("lr_schedule", &O::lr_schedule,
           "paper (Noam: --lr-factor, --warmup) | cosine | rsqrt: planned for the budget (--max-minutes, --max-steps "
           "or --max-epochs): warm-up over --warmup-fraction of the planned updates, at the floor when the budget ends",
           optim)
      .add("lr", &O::lr, "peak learning rate of a cosine or rsqrt schedule", optim)
      .add("warmup_fraction", &O::warmup_fraction, "cosine/rsqrt: warm-up as a fraction of the planned updates", optim)
      .add("min_lr_ratio", &O::min_lr_ratio, "cosine/rsqrt: the floor the schedule ends at, as a fraction of --lr", optim)
      .add("cooldown_fraction", &O::cooldown_fraction, "rsqrt: the final fraction that decays linearly to the floor", optim)
      .add("ema_decay", &O::ema_decay,
           "keep an exponential moving average of the weights with this decay (e.g. 0.999; 0 = off); validated "
           "beside the weights, and checkpoint_best.pt holds whichever scores higher",
           optim)
      .add("average_best", &O::average_best,
           "keep the weights of the N best validations (top_<step>.pt) and validate their average beside the "
           "weights; checkpoint_best.pt holds whichever scores higher (0 = off)",
           optim)
      .add("label_smoothing", &O::label_smoothing, "label smoothing epsilon", optim)
      .add("output_columns", &O::output_columns,
           "corpus: close the output columns (pieces) no training or validation target holds, so the model never "
           "predicts them and training computes only the others (faster) | all: train every column",
           optim)
      .add("bpe_dropout", &O::bpe_dropout,
           "BPE-dropout: segment each training pair anew every epoch, skipping each merge at this probability "
           "(subword regularisation, e.g. 0.1; 0 = off)",
           optim)
      .add("rdrop_alpha", &O::rdrop_alpha,
           "R-Drop: run each batch twice under two dropout masks and add this weight x the symmetric KL "
           "between the two copies' predictions (regularisation; e.g. 5; 0 = off; about 2x the time per update)",
           optim)
      .add("clip_norm", &O::clip_norm, "gradient clipping max norm (0 = off)", optim)
      .add("max_bad_steps", &O::max_bad_steps, "non-finite steps in a row before stopping", optim)
      .add("seed", &O::seed, "random seed", optim)
      .add("device", &O::device, "auto|cpu|cuda|cuda:N", run)
      .add("dtype", &O::dtype, "auto|fp32|bf16|fp16 (auto: on a GPU or a CPU with native bf16, whichever of fp32 and bf16 trains this model faster here, measured once and cached; fp16: CUDA, with loss scaling)", run)
      .add("threads", &O::threads, "CPU threads (0 = all cores)", run)
      .add("out", &O::out, "run directory", run)
      .add("resume", &O::resume, "continue RUN_DIR/checkpoint_last.pt exactly", run)
      .add("init_from", &O::init_from,
           "fine-tune: start from this checkpoint's weights and vocabulary (torchmt's, or `torchmt import`'s) with a "
           "new schedule and fresh optimizer state; the model options are the checkpoint's",
           run)
      .add("validate_every", &O::validate_every, "validate every N steps (0 = every epoch)", run)
      .add("log_every", &O::log_every, "steps between log lines when stderr is not a terminal", run)
      .add("keep_last", &O::keep_last, "numbered checkpoints to keep", run)
      .add("valid_batch_size", &O::valid_batch_size, "sentences per batch when translating the validation set", run)
      .add("nproc_per_node", &O::nproc_per_node,
           "data-parallel workers to start on this machine (processes on c10d/Gloo; across machines start "
           "one process per worker with torchrun's RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT instead)",
           dist)
      .add("dist_timeout", &O::dist_timeout,
           "seconds a worker waits for the others (a worker that died or hangs stops the job after this)", dist)
      .add("bucket_mb", &O::bucket_mb,
           "MB of gradients per all-reduce bucket (the first, of the last layers, 1 MB as in DDP)", dist)
      .add("overlap_allreduce", &O::overlap_allreduce,
           "start each bucket's all-reduce during the backward pass (false: after it)", dist);
  return table;
}

TrainOptions TrainOptions::from_config(const FlatConfig& config) {
  TrainOptions o = train_option_table().read(with_recipe(config));
  o.validate();
  return o;
}

FlatConfig TrainOptions::to_config() const { return train_option_table().write(*this); }

void TrainOptions::validate() const {
  auto require = [](bool ok, const std::string& msg) {
    if (!ok) throw std::invalid_argument(msg);
  };
  require(train_src.empty() == train_tgt.empty(), "--train-src and --train-tgt go together");
  require(train_src.empty() != train_data.empty(),
          train_data.empty() ? "give the training data: --train-src and --train-tgt, or --train-data"
                             : "give --train-data or --train-src/--train-tgt, not both");
  if (!source_language.empty()) check_language_code(source_language, "--source-language");
  if (!target_language.empty()) check_language_code(target_language, "--target-language");
  require(shuffle_window >= 0, "--shuffle-window must be >= 0");
  require(valid_src.empty() == valid_tgt.empty(), "--valid-src and --valid-tgt go together");
  require(vocab_size >= 16, "--vocab-size must be at least 16");
  require(batch_tokens > 0, "--batch-tokens must be positive");
  require(max_sentence_tokens >= 2, "--max-sentence-tokens must be at least 2");
  require(update_freq >= 1, "--update-freq must be at least 1");
  require(moe_aux_loss >= 0, "--moe-aux-loss must not be negative");
  if (dtype == "fp16" || dtype == "float16") check_training_dtype(c10::ScalarType::Half, resolve_device(device, 0));
  require(checkpoint_activations.empty() || checkpoint_activations == "true" || checkpoint_activations == "false",
          "--checkpoint-activations must be true or false");
  require(max_epochs >= 0 && max_steps >= 0 && max_minutes >= 0, "limits must not be negative");
  require(lr_factor > 0 && warmup > 0, "--lr-factor and --warmup must be positive");
  require(lr_schedule == "paper" || lr_schedule == "cosine" || lr_schedule == "rsqrt",
          "--lr-schedule must be paper, cosine or rsqrt");
  require(lr_schedule == "paper" || max_steps > 0 || max_epochs > 0 || max_minutes > 0,
          "--lr-schedule " + lr_schedule + " plans for a budget: give --max-minutes, --max-steps or --max-epochs");
  require(lr > 0 && lr < 1, "--lr must be in (0, 1)");
  require(warmup_fraction >= 0 && warmup_fraction < 1, "--warmup-fraction must be in [0, 1)");
  require(min_lr_ratio >= 0 && min_lr_ratio <= 1, "--min-lr-ratio must be in [0, 1]");
  require(cooldown_fraction > 0 && cooldown_fraction <= 1, "--cooldown-fraction must be in (0, 1]");
  require(average_best == 0 || (average_best >= 2 && average_best <= 100), "--average-best must be 0 (off) or 2..100");
  require(average_best == 0 || !valid_src.empty(), "--average-best needs a validation set (--valid-src, --valid-tgt)");
  require(ema_decay == 0 || (ema_decay > 0 && ema_decay < 1), "--ema-decay must be 0 (off) or in (0, 1)");
  require(label_smoothing >= 0 && label_smoothing < 1, "--label-smoothing must be in [0, 1)");
  require(bpe_dropout >= 0 && bpe_dropout < 1, "--bpe-dropout must be in [0, 1)");
  // The model overrides: -1 keeps the preset's value; anything else must be one (0 or NaN was
  // silently the preset's).
  for (const auto& [flag, value] : {std::pair{"--d-model", d_model}, {"--num-heads", num_heads},
                                    {"--encoder-layers", encoder_layers}, {"--decoder-layers", decoder_layers},
                                    {"--d-ff", d_ff}, {"--experts", experts}, {"--top-k", top_k}})
    require(value == -1 || value > 0, std::string(flag) + " must be positive (or -1: the preset's)");
  require(dropout == -1 || (dropout >= 0 && dropout < 1), "--dropout must be in [0, 1) (or -1: the preset's)");
  require(threads >= 0 && threads <= kMaxThreads, "--threads must be in [0, " + std::to_string(kMaxThreads) + "]");
  require(std::isfinite(lr_factor), "--lr-factor must be a finite number");
  require(output_columns == "corpus" || output_columns == "all",
          "--output-columns must be corpus or all, not '" + output_columns + "'");
  require(rdrop_alpha >= 0 && std::isfinite(rdrop_alpha), "--rdrop-alpha must be 0 (off) or positive");
  require(clip_norm >= 0, "--clip-norm must not be negative");
  require(tie_embeddings == "auto" || tie_embeddings == "true" || tie_embeddings == "false",
          "--tie-embeddings must be auto, true or false");
  require(keep_last >= 0 && log_every >= 1 && validate_every >= 0, "invalid logging/checkpoint interval");
  require(!out.empty(), "--out must name a run directory");
  require(nproc_per_node >= 1 && nproc_per_node <= 1024, "--nproc-per-node must be between 1 and 1024");
  require(dist_timeout > 0, "--dist-timeout must be positive");
  require(bucket_mb > 0, "--bucket-mb must be positive");
}

}  // namespace torchmt
