#include "training_scheduler.h"

#include <cstdio>

#include <torch/torch.h>

#include "training/process_group.h"
#include "util/stop_signals.h"

namespace torchmt {
namespace {

// Rank 0's values on every rank.
std::vector<double> from_rank0(ProcessGroup* group, std::vector<double> values) {
  if (group == nullptr) return values;
  auto t = torch::tensor(values, torch::kDouble);
  group->broadcast({t}, 0);
  for (size_t i = 0; i < values.size(); ++i) values[i] = t[static_cast<int64_t>(i)].item<double>();
  return values;
}

}  // namespace

TrainingScheduler::TrainingScheduler(const TrainOptions& o, int64_t d_model, int64_t batches_per_epoch, int64_t world,
                                     const TrainingPosition& start, ProcessGroup* group)
    : o_(o),
      group_(group),
      stop_({o.max_steps, o.max_epochs, o.max_minutes}, batches_per_epoch, o.update_freq * world),
      paper_(o.lr_factor, d_model, o.warmup) {
  if (o.lr_schedule == "paper") return;
  budget_.emplace(BudgetScheduleOptions{parse_budget_shape(o.lr_schedule), o.lr, o.warmup_fraction, o.min_lr_ratio,
                                        o.cooldown_fraction});
  planner_.emplace(o.max_steps, o.max_epochs, o.max_minutes,
                   static_cast<double>(batches_per_epoch) / static_cast<double>(o.update_freq * world));
  // A resumed time budget plans from the earlier runs' throughput until this one's is measured.
  if (start.step > 0) resumed_seconds_per_update_ = start.train_seconds / static_cast<double>(start.step);
  planned_ = planner_->planned_steps(start, resumed_seconds_per_update_);
}

bool TrainingScheduler::keep_going(const TrainingPosition& position) const {
  const bool go = !stop_.reached(position) && !StopSignals::requested();
  return group_ ? group_->all_true(go) : go;
}

double TrainingScheduler::lr(int64_t step) const { return budget_ ? budget_->lr(step, planned_) : paper_.lr(step); }

std::optional<std::string> TrainingScheduler::after_update(const TrainingPosition& position, double seconds,
                                                           int64_t updates) {
  if (!planner_) return std::nullopt;
  planner_->record(position, seconds);
  if (o_.max_minutes > 0)  // a step or epoch budget is exact from the start
    planned_ = static_cast<int64_t>(
        from_rank0(group_, {static_cast<double>(planner_->planned_steps(position, resumed_seconds_per_update_))})[0]);
  if (plan_reported_ || (o_.max_minutes > 0 && updates != 20)) return std::nullopt;
  plan_reported_ = true;
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "schedule %s: %lld updates planned for the budget%s, warm-up %lld, peak %.2e, floor %.2e",
                o_.lr_schedule.c_str(), static_cast<long long>(planned_),
                planner_->measured() && o_.max_minutes > 0
                    ? (" (" + std::to_string(planner_->seconds_per_update()).substr(0, 5) + " s per update measured)").c_str()
                    : "",
                static_cast<long long>(budget_->warmup_steps(planned_)), o_.lr, o_.lr * o_.min_lr_ratio);
  return std::string(buf);
}

bool TrainingScheduler::do_validate(const TrainingPosition& position, bool epoch_done) const {
  return o_.validate_every > 0 ? position.step % o_.validate_every == 0 : epoch_done;
}

TrainingScheduler::Ending TrainingScheduler::ending(const TrainingPosition& position,
                                                    int64_t last_validated_step) const {
  Ending e;
  e.interrupted = StopSignals::requested() || !stop_.reached(position);
  e.validate = !e.interrupted && last_validated_step != position.step;
  // Rank 0's view decides (a time limit may read differently elsewhere; only rank 0 knows when
  // it last validated), and every rank then makes the same calls.
  const auto decided = from_rank0(group_, {e.interrupted ? 1.0 : 0.0, e.validate ? 1.0 : 0.0});
  e.interrupted = decided[0] != 0;
  e.validate = decided[1] != 0;
  return e;
}

}  // namespace torchmt
