#pragma once
// Trainer: the paper's recipe end to end (`torchmt train`). Reads and encodes the corpus,
// builds or loads the tokenizer, trains with label-smoothed cross-entropy, Adam and the
// inverse-square-root schedule under bf16 autocast, validates (loss + greedy BLEU), writes
// metrics.csv / curves.svg and crash-safe checkpoints, and resumes exactly.
#include <functional>
#include <string>

#include "torchmt/training/train_options.h"

namespace torchmt {

struct TrainSummary {
  int64_t steps = 0;
  int64_t epochs_completed = 0;
  double best_bleu = -1, last_bleu = -1, last_valid_loss = 0;
  double last_train_loss = 0;  // label-smoothed loss per target token of the last update
  double train_seconds = 0;
  double tokens_per_sec = 0;
  bool interrupted = false;  // stopped by SIGINT/SIGTERM (checkpoint saved)
  std::string best_checkpoint;
  bool reporting = true;  // false on data-parallel workers other than rank 0
};

class Trainer {
 public:
  explicit Trainer(TrainOptions options);
  // Runs until a limit (steps, epochs, minutes) or a signal. Throws std::runtime_error on
  // bad input or when training diverges (after max_bad_steps non-finite steps in a row).
  TrainSummary run();

 private:
  TrainOptions options_;
};

// Set by SIGINT/SIGTERM while a Trainer runs; the loop saves a checkpoint and returns.
void request_training_stop();

}  // namespace torchmt
