#pragma once
// A learning-rate schedule that plans for the run's budget (--lr-schedule cosine | rsqrt):
// a linear warm-up over a fraction of the planned updates, then a decay that reaches its floor
// exactly at the last planned update:
//   cosine: floor + (peak - floor) * (1 + cos(pi * progress)) / 2 after the warm-up;
//   rsqrt:  peak * sqrt(warmup / step) (the paper's shape) until the final `cooldown_fraction`
//           of the budget, then linearly down to the floor (the "cool-down" of budgeted runs).
// The planned number of updates comes from --max-steps / --max-epochs, or for --max-minutes
// from the throughput measured so far (BudgetPlanner), and may change while the run goes on.
#include <cstdint>
#include <string>

#include "io/training_position.h"

namespace torchmt {

enum class BudgetShape { kCosine, kRsqrt };
BudgetShape parse_budget_shape(const std::string& name);  // "cosine" | "rsqrt"

struct BudgetScheduleOptions {
  BudgetShape shape = BudgetShape::kCosine;
  double peak_lr = 1e-3;
  double warmup_fraction = 0.05;    // of the planned updates
  double min_lr_ratio = 0.01;       // the floor, as a fraction of the peak
  double cooldown_fraction = 0.2;   // rsqrt only: the final linear part
};

class BudgetSchedule {
 public:
  explicit BudgetSchedule(BudgetScheduleOptions options);
  // The learning rate of update `step` (1-based) of `planned_steps`; past the plan, the floor.
  double lr(int64_t step, int64_t planned_steps) const;
  // Warm-up updates for a plan of `planned_steps` (at least 1).
  int64_t warmup_steps(int64_t planned_steps) const;

 private:
  BudgetScheduleOptions o_;
};

// How many updates the budget buys. Exact for step and epoch limits; for a time limit,
// estimated from the seconds per update measured in this process (the first `skip` updates,
// which carry one-off costs, are left out), re-estimated at every update.
class BudgetPlanner {
 public:
  // `steps_per_epoch`: updates per epoch (for an epoch limit); 0 = none of the limits below
  // is set means there is no budget (the caller refuses that).
  BudgetPlanner(int64_t max_steps, int64_t max_epochs, double max_minutes, double steps_per_epoch, int64_t skip = 2);
  // Called after each update with where training stands and this process's training seconds.
  void record(const TrainingPosition& position, double process_seconds);
  // The planned total; before anything is measured, a time budget plans from `fallback`
  // seconds per update.
  int64_t planned_steps(const TrainingPosition& position, double fallback_seconds_per_update = 1.0) const;
  bool measured() const { return measured_updates_ > 0; }
  double seconds_per_update() const;

 private:
  int64_t max_steps_, max_epochs_;
  double max_minutes_, steps_per_epoch_;
  int64_t skip_, seen_ = 0, measured_updates_ = 0;
  double skip_seconds_ = 0, last_seconds_ = 0;
};

}  // namespace torchmt
