#pragma once
// The paper's learning-rate schedule (§5.3, "Noam"):
//   lr(step) = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), step >= 1.
#include <cstdint>

namespace torchmt {

class InverseSqrtSchedule {
 public:
  InverseSqrtSchedule(double factor, int64_t d_model, int64_t warmup_steps);
  double lr(int64_t step) const;

 private:
  double factor_;
  double d_model_;
  double warmup_;
};

}  // namespace torchmt
