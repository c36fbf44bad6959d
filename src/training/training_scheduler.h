#pragma once
// The run's decisions, named (Marian's Scheduler, fairseq's do_validate / do_save): whether to go
// on, each update's learning rate, when to validate, and how the run ends. Owns the stop limits,
// the learning-rate schedule (the paper's inverse square root, or a budget schedule whose plan a
// time budget re-estimates from the measured throughput) and, under data parallelism, makes
// every rank follow rank 0.
#include <cstdint>
#include <optional>
#include <string>

#include "io/training_position.h"
#include "training/budget_schedule.h"
#include "training/inverse_sqrt_schedule.h"
#include "training/stop_criteria.h"
#include "torchmt/training/train_options.h"

namespace torchmt {

class ProcessGroup;

class TrainingScheduler {
 public:
  // `updates_per_batch_count`: batches one update reads over all ranks (update_freq x world).
  TrainingScheduler(const TrainOptions& options, int64_t d_model, int64_t batches_per_epoch, int64_t world,
                    const TrainingPosition& start, ProcessGroup* group);

  // No limit reached and no stop requested, on every rank (a time limit or a signal may reach
  // one first).
  bool keep_going(const TrainingPosition& position) const;
  // Whether a limit is reached at `position` (this rank's view).
  bool limit_reached(const TrainingPosition& position) const { return stop_.reached(position); }
  // The learning rate of update `step` (1-based).
  double lr(int64_t step) const;
  // After an applied update (`updates` of this process so far, `seconds` of training): a time
  // budget is planned again (rank 0's plan on every rank). Returns the plan's line once it is
  // worth saying: at once for an exact budget, after 20 updates for a time budget.
  std::optional<std::string> after_update(const TrainingPosition& position, double seconds, int64_t updates);
  // Validate (and save the numbered checkpoint) after this update.
  bool do_validate(const TrainingPosition& position, bool epoch_done) const;
  // Seconds until the nearest limit, or -1.
  double eta_seconds(const TrainingPosition& position, double seconds_per_update) const {
    return stop_.eta_seconds(position, seconds_per_update);
  }

  // How the run ends once the loop has: interrupted (a signal here or at another rank: save
  // only), or validate once more when the last update was not validated. Rank 0 decides.
  struct Ending {
    bool interrupted = false, validate = false;
  };
  Ending ending(const TrainingPosition& position, int64_t last_validated_step) const;

 private:
  const TrainOptions& o_;
  ProcessGroup* group_;
  StopCriteria stop_;
  InverseSqrtSchedule paper_;
  std::optional<BudgetSchedule> budget_;
  std::optional<BudgetPlanner> planner_;
  int64_t planned_ = 0;
  double resumed_seconds_per_update_ = 1.0;
  bool plan_reported_ = false;
};

}  // namespace torchmt
