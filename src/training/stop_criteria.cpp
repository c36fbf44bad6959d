#include "training/stop_criteria.h"

#include <algorithm>

namespace torchmt {

StopCriteria::StopCriteria(TrainingLimits limits, int64_t batches_per_epoch, int64_t update_freq)
    : limits_(limits), batches_per_epoch_(batches_per_epoch), update_freq_(std::max<int64_t>(1, update_freq)) {}

bool StopCriteria::reached(const TrainingPosition& p) const {
  if (limits_.max_steps > 0 && p.step >= limits_.max_steps) return true;
  if (limits_.max_epochs > 0 && p.epoch > limits_.max_epochs) return true;
  if (limits_.max_minutes > 0 && p.train_seconds / 60.0 >= limits_.max_minutes) return true;
  return false;
}

double StopCriteria::eta_seconds(const TrainingPosition& p, double seconds_per_update) const {
  double eta = -1;
  auto nearest = [&eta](double e) { eta = eta < 0 ? e : std::min(eta, e); };
  if (limits_.max_steps > 0) nearest(seconds_per_update * static_cast<double>(limits_.max_steps - p.step));
  if (limits_.max_epochs > 0) {
    const double remaining_batches =
        static_cast<double>((limits_.max_epochs - p.epoch + 1) * batches_per_epoch_ - p.batch_index);
    nearest(seconds_per_update * remaining_batches / static_cast<double>(update_freq_));
  }
  if (limits_.max_minutes > 0) nearest(limits_.max_minutes * 60 - p.train_seconds);
  return eta;
}

}  // namespace torchmt
