#pragma once
// Trainer: the paper's recipe end to end (`torchmt train`). Reads and encodes the corpus,
// builds or loads the tokenizer, trains with label-smoothed cross-entropy, Adam and the
// inverse-square-root schedule under bf16 autocast, validates (loss + greedy BLEU), writes
// metrics.csv / curves.svg and crash-safe checkpoints, and resumes exactly.
#include <functional>
#include <optional>
#include <string>

#include "torchmt/kernels/runtime.h"
#include "torchmt/training/train_options.h"

namespace torchmt {

struct TrainSummary {
  int64_t steps = 0;
  int64_t epochs_completed = 0;
  double best_bleu = -1, last_bleu = -1, last_valid_loss = 0;
  double last_train_loss = 0;  // label-smoothed loss per target token of the last update
  double train_seconds = 0;
  double tokens_per_sec = 0;
  bool interrupted = false;  // stopped by SIGINT/SIGTERM (checkpoint saved; during set-up: nothing to save)
  std::string best_checkpoint;
  bool reporting = true;  // false on data-parallel workers other than rank 0
};

// What the program around a run asks of it beyond the options.
struct TrainHooks {
  // SIGINT/SIGTERM end the run with a checkpoint while it runs (their handlers installed, the
  // previous ones put back after): for a program that owns its process, as the CLI does. Off,
  // the process's handlers stay as they are and request_training_stop() ends the run.
  bool stop_on_signals = false;
  // Each progress line the run writes to stderr (the update lines with their step, -1 for the
  // others), called from the thread that runs it.
  std::function<void(int64_t step, const std::string& line)> on_progress = {};
  // The kernels' settings for the run's own threads and its validation (kernels/runtime.h);
  // unset: the process's. The CLI sets Runtime::from_environment().
  std::optional<Runtime> runtime = {};
};

class Trainer {
 public:
  explicit Trainer(TrainOptions options);
  // Runs until a limit (steps, epochs, minutes) or a stop request. Throws std::runtime_error on
  // bad input or when training diverges (after max_bad_steps non-finite steps in a row).
  TrainSummary run(const TrainHooks& hooks = {});

 private:
  TrainOptions options_;
};

// Ends the running Trainer's run as SIGINT does under TrainHooks::stop_on_signals: the loop
// saves a checkpoint and returns (from any thread; a run that starts later clears it).
void request_training_stop();

}  // namespace torchmt
