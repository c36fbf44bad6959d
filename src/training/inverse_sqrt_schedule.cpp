#include "training/inverse_sqrt_schedule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace torchmt {

InverseSqrtSchedule::InverseSqrtSchedule(double factor, int64_t d_model, int64_t warmup_steps)
    : factor_(factor), d_model_(static_cast<double>(d_model)), warmup_(static_cast<double>(warmup_steps)) {
  if (factor <= 0 || d_model <= 0 || warmup_steps <= 0)
    throw std::invalid_argument("lr schedule needs a positive factor, d_model and warmup");
}

double InverseSqrtSchedule::lr(int64_t step) const {
  const double s = static_cast<double>(std::max<int64_t>(step, 1));
  return factor_ * std::pow(d_model_, -0.5) * std::min(std::pow(s, -0.5), s * std::pow(warmup_, -1.5));
}

}  // namespace torchmt
