#pragma once
// Threads that live as long as their owner and run one task per worker on request (the
// Translator's workers). Persistent rather than one std::thread per call: streaming calls
// translate() once per window, and every new thread gets a new malloc arena, which kept its
// memory, so peak RSS grew with the number of windows; the same threads for every window keep
// it at the first window's (tools/bench/DECISIONS.md).
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace torchmt {

class WorkerPool {
 public:
  WorkerPool() = default;
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs task(0) ... task(workers - 1), each on its own pool thread (started when first
  // needed), and returns when all have returned. Calls from several threads run one at a
  // time. `task` must not throw (catch inside it).
  void run(int64_t workers, const std::function<void(int64_t)>& task);

 private:
  void loop(int64_t index);
  std::mutex run_mutex_;  // one run() at a time
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  const std::function<void(int64_t)>* task_ = nullptr;
  int64_t generation_ = 0, active_ = 0, remaining_ = 0;
  bool stop_ = false;
};

}  // namespace torchmt
