#include "util/stopwatch.h"

#include <torch/cuda.h>

namespace torchmt {

void synchronize(const c10::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

Stopwatch::Stopwatch(const c10::Device& device) : device_(device) { restart(); }

void Stopwatch::restart() {
  synchronize(device_);
  start_ = std::chrono::steady_clock::now();
}

double Stopwatch::seconds() const {
  synchronize(device_);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

}  // namespace torchmt
