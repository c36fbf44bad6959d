#pragma once
// How many threads the calling thread's own ATen / OpenMP / MKL operations use, for this thread
// only. at::set_num_threads also writes ATen's process-wide count, which every thread started
// later inherits: a library inside another program (a Python process, a server) must not touch
// it, so torchmt sizes its teams per thread and puts back what it found.
namespace torchmt {

// The most threads any thread option takes (a team, workers, a pool): OpenMP crashed starting a
// team of 100,000.
constexpr long kMaxThreads = 1024;

// The calling thread's team size (at::get_num_threads() on this thread).
int thread_team();

// Sets the calling thread's team: OpenMP's and MKL's per-thread counts; ATen's global count and
// other threads are left alone. n >= 1.
void set_thread_team(int n);

// set_thread_team(n) for a scope, then the calling thread's previous team again. Sets nothing
// where the team is already n (changing it costs oneDNN's cached primitives).
class ScopedThreadTeam {
 public:
  explicit ScopedThreadTeam(int n);
  ~ScopedThreadTeam();
  ScopedThreadTeam(const ScopedThreadTeam&) = delete;
  ScopedThreadTeam& operator=(const ScopedThreadTeam&) = delete;

 private:
  int previous_;
  int previous_mkl_ = 0;  // MKL's per-thread count before (0: it followed OpenMP's)
  bool changed_;
};

}  // namespace torchmt
