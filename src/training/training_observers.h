#pragma once
// What happens around the training loop (Marian's TrainingObservers): after each update, after
// each validation and at each save, the run tells its observers, in the order they were added;
// the loop itself only trains, validates and decides.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "training/checkpoint_manager.h"
#include "training/exponential_moving_average.h"
#include "training/metrics_log.h"
#include "training/validator.h"
#include "util/progress.h"

namespace torchmt {

// After an applied update.
struct UpdateReport {
  int64_t step = 0;
  int64_t epoch = 0;  // the epoch the update began in
  double lr = 0;
  double loss_per_token = 0;      // label-smoothed
  double tokens_per_second = 0;   // this process's training so far
  double train_seconds = 0;       // of the whole run, resumes included
  double eta_seconds = -1;        // until the nearest limit; -1: none
};

// The weights checkpoint_best.pt may hold: the weights themselves, their moving average
// (--ema-decay), the average of the best validations' weights (--average-best).
enum class BestWeights { kNone, kWeights, kMovingAverage, kBestAverage };

// After a validation (rank 0).
struct ValidationReport {
  ValidationRecord record;  // metrics.csv's row
  ValidationScores scores;  // the weights'
  std::optional<ValidationScores> moving_average, best_average;
  BestWeights best = BestWeights::kNone;  // the one that became the best so far, if any
  std::string corpora_drawn;              // with several corpora: pairs each gave so far
};

// A save (rank 0): checkpoint_last.pt always; the best weights when `best`; a numbered copy after
// a validation.
struct SaveReport {
  BestWeights best = BestWeights::kNone;
  bool numbered = false;
  const std::vector<at::Tensor>* best_average = nullptr;  // the weights, for kBestAverage
};

class TrainingObserver {
 public:
  virtual ~TrainingObserver() = default;
  virtual void on_update(const UpdateReport&) {}
  virtual void on_validation(const ValidationReport&) {}
  virtual void on_save(const SaveReport&) {}
};

// The run's log on stderr (util's Progress): set-up lines, the update line (redrawn on a
// terminal, every `log_every` updates in a log) and the validation lines; each also to `hook`.
// `quiet`: a data-parallel worker other than rank 0 (rank 0 reports for the job).
class ProgressObserver : public TrainingObserver {
 public:
  ProgressObserver(int64_t log_every, bool quiet, std::function<void(int64_t, const std::string&)> hook);
  void line(const std::string& text);
  void on_update(const UpdateReport& u) override;
  void on_validation(const ValidationReport& v) override;

 private:
  Progress progress_;
  bool quiet_;
  int64_t log_every_;
  std::function<void(int64_t, const std::string&)> hook_;
};

// metrics.csv and curves.svg.
class MetricsObserver : public TrainingObserver {
 public:
  MetricsObserver(const std::string& run_dir, int64_t resume_step) : log_(run_dir, resume_step) {}
  const std::vector<ValidationRecord>& records() const { return log_.records(); }
  void on_validation(const ValidationReport& v) override { log_.add(v.record); }

 private:
  MetricsLog log_;
};

// --ema-decay: the moving average follows every update (on every rank).
class MovingAverageObserver : public TrainingObserver {
 public:
  explicit MovingAverageObserver(ExponentialMovingAverage& ema) : ema_(ema) {}
  void on_update(const UpdateReport& u) override { ema_.update(u.step); }

 private:
  ExponentialMovingAverage& ema_;
};

// The run's checkpoints (CheckpointManager), from the model, the optimizer and the metadata as
// they are at the save.
class CheckpointObserver : public TrainingObserver {
 public:
  CheckpointObserver(CheckpointManager& checkpoints, const Transformer& model, const OptimizerState& optimizer,
                     const CheckpointMeta& meta, const ExponentialMovingAverage* ema)
      : checkpoints_(checkpoints), model_(model), optimizer_(optimizer), meta_(meta), ema_(ema) {}
  void on_save(const SaveReport& s) override;

 private:
  CheckpointManager& checkpoints_;
  const Transformer& model_;
  const OptimizerState& optimizer_;
  const CheckpointMeta& meta_;
  const ExponentialMovingAverage* ema_;
};

}  // namespace torchmt
