#pragma once
// at::parallel_for for torchmt's kernels: its helper threads (OpenMP's) run under the calling
// thread's kernel settings (cpu_isa.h), so a RuntimeScope holds inside every chunk.
#include <cstdint>

#include <ATen/Parallel.h>

#include "cpu_isa.h"

namespace torchmt::kernels {

class ThreadKernelSettings {
 public:
  explicit ThreadKernelSettings(const KernelSettings* settings) : previous_(thread_kernel_settings()) {
    set_thread_kernel_settings(settings);
  }
  ~ThreadKernelSettings() { set_thread_kernel_settings(previous_); }
  ThreadKernelSettings(const ThreadKernelSettings&) = delete;
  ThreadKernelSettings& operator=(const ThreadKernelSettings&) = delete;

 private:
  const KernelSettings* previous_;
};

template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  const KernelSettings* settings = thread_kernel_settings();
  at::parallel_for(begin, end, grain, [&](int64_t b, int64_t e) {
    ThreadKernelSettings scope(settings);
    f(b, e);
  });
}

}  // namespace torchmt::kernels
