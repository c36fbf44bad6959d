#pragma once
// Wall-clock timing of device work: on CUDA the device is synchronised when the watch starts
// and when it is read, so the figure covers the queued kernels and not just their launches.
#include <chrono>

#include <c10/core/Device.h>

namespace torchmt {

// Waits for all work queued on `device` (no-op on CPU).
void synchronize(const c10::Device& device);

class Stopwatch {
 public:
  explicit Stopwatch(const c10::Device& device = c10::Device(c10::kCPU));
  void restart();
  double seconds() const;  // since construction / restart, after the device's queue drained

 private:
  c10::Device device_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace torchmt
