#include "training/budget_schedule.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace torchmt {

BudgetShape parse_budget_shape(const std::string& name) {
  if (name == "cosine") return BudgetShape::kCosine;
  if (name == "rsqrt") return BudgetShape::kRsqrt;
  throw std::invalid_argument("unknown learning-rate schedule '" + name + "' (expected paper, cosine or rsqrt)");
}

BudgetSchedule::BudgetSchedule(BudgetScheduleOptions options) : o_(options) {
  if (!(o_.peak_lr > 0)) throw std::invalid_argument("--lr must be positive");
  if (!(o_.warmup_fraction >= 0 && o_.warmup_fraction < 1)) throw std::invalid_argument("--warmup-fraction must be in [0, 1)");
  if (!(o_.min_lr_ratio >= 0 && o_.min_lr_ratio <= 1)) throw std::invalid_argument("--min-lr-ratio must be in [0, 1]");
  if (!(o_.cooldown_fraction > 0 && o_.cooldown_fraction <= 1))
    throw std::invalid_argument("--cooldown-fraction must be in (0, 1]");
}

int64_t BudgetSchedule::warmup_steps(int64_t planned) const {
  return std::max<int64_t>(1, std::llround(o_.warmup_fraction * static_cast<double>(std::max<int64_t>(planned, 1))));
}

double BudgetSchedule::lr(int64_t step, int64_t planned) const {
  planned = std::max<int64_t>(planned, 1);
  const double floor = o_.peak_lr * o_.min_lr_ratio;
  const double s = static_cast<double>(std::max<int64_t>(step, 1)), total = static_cast<double>(planned);
  const double warmup = static_cast<double>(warmup_steps(planned));
  if (s <= warmup) return o_.peak_lr * s / warmup;
  if (s >= total) return floor;
  if (o_.shape == BudgetShape::kCosine) {
    const double progress = (s - warmup) / std::max(1.0, total - warmup);  // (0, 1)
    return floor + (o_.peak_lr - floor) * 0.5 * (1 + std::cos(M_PI * progress));
  }
  // rsqrt with the cool-down starting at `cool` (never before the warm-up ends).
  const double cool = std::max(warmup, total * (1 - o_.cooldown_fraction));
  auto rsqrt = [&](double x) { return std::max(floor, o_.peak_lr * std::sqrt(warmup / x)); };
  if (s <= cool) return rsqrt(s);
  return floor + (rsqrt(cool) - floor) * (total - s) / std::max(1.0, total - cool);
}

BudgetPlanner::BudgetPlanner(int64_t max_steps, int64_t max_epochs, double max_minutes, double steps_per_epoch,
                             int64_t skip)
    : max_steps_(max_steps), max_epochs_(max_epochs), max_minutes_(max_minutes), steps_per_epoch_(steps_per_epoch),
      skip_(skip) {}

void BudgetPlanner::record(const TrainingPosition&, double process_seconds) {
  ++seen_;
  if (seen_ <= skip_) {
    skip_seconds_ = process_seconds;
  } else {
    ++measured_updates_;
  }
  last_seconds_ = process_seconds;
}

double BudgetPlanner::seconds_per_update() const {
  if (measured_updates_ == 0) return 0;
  return (last_seconds_ - skip_seconds_) / static_cast<double>(measured_updates_);
}

int64_t BudgetPlanner::planned_steps(const TrainingPosition& p, double fallback) const {
  double planned = std::numeric_limits<double>::infinity();
  if (max_steps_ > 0) planned = static_cast<double>(max_steps_);
  if (max_epochs_ > 0 && steps_per_epoch_ > 0)
    planned = std::min(planned, std::ceil(static_cast<double>(max_epochs_) * steps_per_epoch_));
  if (max_minutes_ > 0) {
    const double per_update = measured() ? seconds_per_update() : fallback;
    const double left = std::max(0.0, max_minutes_ * 60 - p.train_seconds);
    planned = std::min(planned, static_cast<double>(p.step) + left / std::max(per_update, 1e-9));
  }
  if (!std::isfinite(planned)) return 0;
  return std::max<int64_t>(1, std::llround(planned));
}

}  // namespace torchmt
