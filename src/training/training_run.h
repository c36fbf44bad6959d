#pragma once
// One `torchmt train` invocation (under Trainer, training/trainer.h). The constructor is the
// set-up, one named step after another (training_run_setup.cpp); loop() trains until the
// scheduler says stop, validating and saving when it says so, and tells the observers
// (trainer.cpp).
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/token_batcher.h"
#include "torchmt/data/tokenizer.h"
#include "io/checkpoint.h"
#include "torchmt/kernels/runtime.h"
#include "training/adam_optimizer.h"
#include "training/checkpoint_manager.h"
#include "training/exponential_moving_average.h"
#include "training/gradient_reducer.h"
#include "training/process_group.h"
#include "torchmt/training/trainer.h"
#include "training/training_corpora.h"
#include "training/training_step.h"
#include "training/validator.h"
#include "util/file_lock.h"
#include "training_observers.h"
#include "training_scheduler.h"

namespace torchmt {

// Label-smoothed training loss per target token since the last validation.
struct LossWindow {
  double loss = 0;
  int64_t tokens = 0;
  void add(double l, int64_t t) {
    loss += l;
    tokens += t;
  }
  double mean() const { return tokens > 0 ? loss / static_cast<double>(tokens) : 0; }
};

class TrainingRun {
 public:
  TrainingRun(const TrainOptions& options, const TrainHooks& hooks);
  TrainSummary loop();

 private:
  using Clock = std::chrono::steady_clock;

  // ---- set-up, in this order ----
  void open_run_directory();
  void join_group();
  void load_tokenizers();
  void read_corpora();
  void build_model();
  void build_batcher();
  void choose_dtype();
  void build_validator();
  void choose_output_columns();
  void record_direction_columns(const at::Tensor& into_target, const at::Tensor& into_source);
  void describe_run();
  void resume();
  void learn_languages();
  void start_from_rank0();
  void report_set_up();
  void add_observers();

  // ---- the loop ----
  // The batches of one update (this rank's share of the one global order).
  std::vector<Batch> next_batches();
  void skip_update(int64_t step, const StepResult& result, int64_t bad_steps);
  UpdateReport count_update(const StepResult& result, int64_t epoch_before, const TrainingScheduler& scheduler);
  // Validates (when asked and there is a validation set), then saves: last always, best when
  // validation improved (or there is none), numbered after a validation.
  void validate_and_save(bool validate);
  ValidationReport validate(std::vector<at::Tensor>& best_average);
  void end_run(const TrainingScheduler& scheduler);
  // Before and after rank 0's work that the others must not overlap (setup, validation, saving).
  void wait_for_rank0();

  const DistributedEnv env_;
  const TrainOptions& o_;
  const bool rank0_;
  ProgressObserver log_;
  std::optional<Runtime> runtime_;  // TrainHooks::runtime
  std::optional<FileLock> run_lock_;  // rank 0: one writer per run directory, to the end of the run
  std::unique_ptr<ProcessGroup> group_;  // data-parallel workers only
  c10::Device device_{c10::kCPU};
  c10::ScalarType dtype_ = c10::ScalarType::Float;
  CheckpointManager checkpoints_;
  std::optional<LoadedCheckpoint> init_;  // --init-from, until its weights are copied
  std::string spm_path_;
  std::optional<std::pair<Tokenizer, Tokenizer>> tokenizers_;  // source, target (one for a joint vocabulary)
  const Tokenizer& src_tokenizer() const { return tokenizers_->first; }
  const Tokenizer& tgt_tokenizer() const { return tokenizers_->second; }
  std::unique_ptr<TrainingCorpora> corpora_;
  std::optional<Validator> validator_;
  ModelConfig model_config_;
  Transformer model_{nullptr};
  std::pair<std::string, std::string> init_languages_;  // --init-from's
  std::pair<std::vector<int64_t>, std::vector<int64_t>> init_columns_;  // --init-from's target_columns, source_columns
  std::optional<std::string> resumed_identifier_;      // --resume: the checkpoint's, for the same languages
  std::unique_ptr<AdamOptimizer> optimizer_;
  std::unique_ptr<TokenBatcher> batcher_;  // points into corpora_
  std::unique_ptr<GradientReducer> reducer_;
  std::unique_ptr<ExponentialMovingAverage> ema_;  // --ema-decay; its tensors live in the optimizer state
  CheckpointMeta meta_;
  TrainingPosition& position_ = meta_.position;

  // Observers, told in this order: the moving average, metrics.csv, the log, the checkpoints.
  std::unique_ptr<MovingAverageObserver> ema_observer_;
  std::unique_ptr<MetricsObserver> metrics_;
  std::unique_ptr<CheckpointObserver> checkpoint_writer_;
  std::vector<TrainingObserver*> observers_;

  // This process's progress.
  TrainSummary summary_;
  double last_lr_ = 0;
  double seconds_before_ = 0;  // training time of earlier runs (resume)
  double train_seconds_ = 0;   // this process, training steps only
  int64_t total_tokens_ = 0, last_validated_step_ = -1;
  double allreduce_wait_ = 0;  // seconds this process waited for gradient all-reduces
  LossWindow window_;
  Clock::time_point run_start_ = Clock::now();
};

}  // namespace torchmt
