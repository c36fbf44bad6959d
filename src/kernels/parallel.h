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

// Rows split into fixed blocks of kRowsPerSumBlock (not by the thread count), for column sums
// (a bias's or a norm's weight gradient) that are the same on any number of threads: each block
// sums into its own row of partials, the partials are then summed in block order.
constexpr int64_t kRowsPerSumBlock = 64;
inline int64_t row_sum_blocks(int64_t rows) {
  return rows <= 0 ? 1 : (rows + kRowsPerSumBlock - 1) / kRowsPerSumBlock;
}
// f(block, first_row, end_row) for each of row_sum_blocks(rows) blocks, in parallel.
template <typename F>
void for_each_row_sum_block(int64_t rows, const F& f) {
  parallel_for(0, row_sum_blocks(rows), 1, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t r0 = blk * kRowsPerSumBlock;
      f(blk, r0, r0 + kRowsPerSumBlock < rows ? r0 + kRowsPerSumBlock : rows);
    }
  });
}

}  // namespace torchmt::kernels
