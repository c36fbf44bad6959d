#pragma once
// When training stops (Marian's Scheduler::keepGoing): the update, epoch and wall-clock
// limits of a run, and the time left until the nearest of them for the progress line.
#include <cstdint>

#include "io/training_position.h"

namespace torchmt {

struct TrainingLimits {
  int64_t max_steps = 0;    // updates; 0 = no limit
  int64_t max_epochs = 0;   // 0 = no limit
  double max_minutes = 0;   // of training (TrainingPosition::train_seconds); 0 = no limit
};

class StopCriteria {
 public:
  // `batches_per_epoch` and `update_freq` turn an epoch limit into remaining updates.
  StopCriteria(TrainingLimits limits, int64_t batches_per_epoch, int64_t update_freq);
  // True once any limit is reached at `position`.
  bool reached(const TrainingPosition& position) const;
  // Seconds until the nearest limit at `seconds_per_update`, or -1 when there is none.
  double eta_seconds(const TrainingPosition& position, double seconds_per_update) const;

 private:
  TrainingLimits limits_;
  int64_t batches_per_epoch_, update_freq_;
};

}  // namespace torchmt
