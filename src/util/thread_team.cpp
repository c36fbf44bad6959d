#include "util/thread_team.h"

#include <stdexcept>
#include <string>

#include <ATen/Parallel.h>
#if defined(_OPENMP)
#include <omp.h>
#endif

// MKL's per-thread count (its C entry point; the lower-case symbol is the Fortran one, which takes
// a pointer), where LibTorch carries MKL (x86 wheels export it); weak, so a LibTorch
// without MKL links too.
extern "C" int MKL_Set_Num_Threads_Local(int) __attribute__((weak));

namespace torchmt {

int thread_team() { return at::get_num_threads(); }  // also runs ATen's per-thread lazy set-up first

namespace {

// Sets OpenMP's and MKL's counts of the calling thread; returns MKL's previous one.
int set_counts(int openmp, int mkl) {
  // ATen sets a thread's counts from its global one on the thread's first parallel call; done
  // first here, so that it cannot overwrite ours later.
  (void)at::get_num_threads();
#if defined(_OPENMP)
  omp_set_num_threads(openmp);
#endif
  return MKL_Set_Num_Threads_Local != nullptr ? MKL_Set_Num_Threads_Local(mkl) : 0;
}

int checked_team(int n) {
  if (n < 1) throw std::invalid_argument("a thread team of " + std::to_string(n) + " threads (at least 1)");
  return n;
}

}  // namespace

void set_thread_team(int n) { set_counts(checked_team(n), n); }

ScopedThreadTeam::ScopedThreadTeam(int n) : previous_(thread_team()), changed_(previous_ != checked_team(n)) {
  if (changed_) previous_mkl_ = set_counts(n, n);
}

ScopedThreadTeam::~ScopedThreadTeam() {
  if (changed_) set_counts(previous_, previous_mkl_);
}

}  // namespace torchmt
