#pragma once
// Where a training run stands: what a checkpoint stores to resume exactly, and what the
// trainer's stop criteria read. Light header (no LibTorch).
#include <cstdint>
#include <limits>

namespace torchmt {

struct TrainingPosition {
  int64_t step = 0;         // optimizer updates done
  int64_t epoch = 1;        // of the next batch
  int64_t batch_index = 0;  // of the next batch within its epoch
  double best_bleu = -1.0;
  double best_loss = std::numeric_limits<double>::infinity();
  double train_seconds = 0.0;  // wall time spent training, accumulated across resumes
};

}  // namespace torchmt
