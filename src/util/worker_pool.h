#pragma once
// Threads that live as long as their owner and run tasks on request (the Translator's workers).
// Persistent rather than one std::thread per call: streaming calls translate() once per window,
// and every new thread gets a new malloc arena, which kept its memory, so peak RSS grew with the
// number of windows; the same threads for every window keep it at the first window's
// (tools/bench/DECISIONS.md).
#include <condition_variable>
#include <cstdint>
#include <deque>
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

  // Runs task(0) ... task(workers - 1), each on a thread of its own among the pool's (at least
  // `workers` of them, started when first needed), and returns when all have returned. Several
  // threads may call it at once (a Python program's threads sharing one Translator): their tasks
  // queue in call order and share the threads, so at most as many tasks run at a time as the pool
  // has threads. `task` must not throw (catch inside it).
  void run(int64_t workers, const std::function<void(int64_t)>& task);

 private:
  struct Call {
    const std::function<void(int64_t)>* task;
    int64_t remaining;
    std::condition_variable done;
    std::vector<size_t> threads;  // the pool threads that took one of its tasks
  };
  struct Item {
    Call* call;
    int64_t index;
  };
  void loop(size_t thread);
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Item> queue_;
  std::vector<std::thread> threads_;
  bool stop_ = false;
};

}  // namespace torchmt
