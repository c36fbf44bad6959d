#pragma once
// Everything `torchmt train` can be told. The defaults are the struct's; the option table
// (train_option_table) gives each its key, flag and help, reads it from YAML/JSON (flags
// override the file) and writes the run's effective configuration back.
#include <string>

#include "torchmt/util/option_table.h"

namespace torchmt {

struct TrainOptions {
  // Data
  std::string train_src, train_tgt, valid_src, valid_tgt;
  // Instead of train_src/train_tgt: a preprocessed dataset directory, or a YAML file listing
  // corpora with weights (training_corpora.h)
  std::string train_data;
  int64_t shuffle_window = 1 << 20;  // pairs sorted by length together (0 = the whole epoch)
  // Also train on every pair reversed (target -> source): one model for both directions, on a
  // joint vocabulary; validation stays source -> target.
  bool both_directions = false;
  std::string spm;  // existing joint SentencePiece model; empty = train one into the run dir
  // The languages the model translates from and into (ISO 639 codes), recorded in its
  // checkpoints; empty = what the training files' suffixes say (train.de -> de), if they say it.
  std::string source_language, target_language;
  int64_t vocab_size = 8000;
  int64_t max_sentence_tokens = 256;  // a pair with a side longer than this (tokens, eos included) is skipped
  // A named recipe (train_recipes.h) sets the defaults below; flags and --config override it
  std::string recipe;
  // Model: preset plus optional overrides (-1 / empty = keep the preset's value)
  std::string preset = "small";
  int64_t d_model = -1, num_heads = -1, encoder_layers = -1, decoder_layers = -1, d_ff = -1;
  double dropout = -1.0;
  std::string activation;
  std::string tie_embeddings = "auto";  // auto (preset, when the vocabulary is joint) | true | false
  std::string norm, positions;          // empty = the preset's
  int64_t kv_heads = -1;
  std::string ffn;                      // empty = the preset's (dense)
  int64_t experts = -1, top_k = -1;     // -1 = keep
  double moe_aux_loss = 0.01;           // weight of the MoE load-balancing loss
  std::string checkpoint_activations;   // empty = the preset's (false) | true | false
  // Optimisation (the paper's recipe)
  int64_t batch_tokens = 4096;  // rows * (longest source + longest target) per batch, padding included
  int64_t update_freq = 1;
  int64_t max_epochs = 0;         // 0 = no limit
  int64_t max_steps = 0;          // 0 = no limit
  double max_minutes = 0.0;       // wall-clock budget, 0 = no limit
  double lr_factor = 1.0;
  int64_t warmup = 4000;
  // The schedule: paper (the two lines above) or one planned for the budget (budget_schedule.h)
  std::string lr_schedule = "paper";
  double lr = 1e-3;               // peak of a budget schedule
  double warmup_fraction = 0.05;  // of the planned updates
  double min_lr_ratio = 0.01;     // floor / peak
  double cooldown_fraction = 0.2; // rsqrt: the final linear part
  double ema_decay = 0;           // exponential moving average of the weights; 0 = off
  int64_t average_best = 0;       // average the weights of the N best validations; 0 = off
  double label_smoothing = 0.1;
  // corpus: the output columns (target pieces) no training or validation target holds are closed
  // and training computes only the open ones | all: every column.
  std::string output_columns = "corpus";
  // BPE-dropout: each training pair segmented anew each epoch with merges skipped at this
  // probability (subword regularisation; 0 = the stored segmentation).
  double bpe_dropout = 0;
  // R-Drop: each batch twice under two dropout masks, their symmetric KL weighted by this
  // (0 = off).
  double rdrop_alpha = 0;
  double clip_norm = 1.0;          // 0 = off
  int64_t max_bad_steps = 5;       // non-finite steps in a row before giving up
  uint64_t seed = 1;
  // Runtime
  std::string device = "auto";
  std::string dtype = "auto";
  int64_t threads = 0;  // 0 = all cores
  std::string out = "runs/default";
  bool resume = false;
  // Start from this checkpoint's weights and vocabulary (a torchmt checkpoint or an imported
  // model) with a new schedule and fresh optimizer state; empty = from scratch.
  std::string init_from;
  int64_t validate_every = 0;  // steps; 0 = every epoch
  int64_t log_every = 100;     // steps between log lines when stderr is not a terminal
  int64_t keep_last = 3;       // numbered checkpoints kept
  int64_t valid_batch_size = 128;
  // Data parallelism (c10d): workers spawned here, or one per process from torchrun's variables
  int64_t nproc_per_node = 1;
  double dist_timeout = 600;     // seconds a collective waits for the other workers
  double bucket_mb = 25;         // gradient all-reduce bucket size (PyTorch DDP's default)
  bool overlap_allreduce = true;  // start a bucket's all-reduce during backward

  // Reads and validates; throws std::invalid_argument on unknown keys or bad values.
  static TrainOptions from_config(const FlatConfig& config);
  FlatConfig to_config() const;
  void validate() const;
};

const OptionTable<TrainOptions>& train_option_table();

}  // namespace torchmt
