#include "torchmt/util/worker_pool.h"

namespace torchmt {

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& thread : threads_) thread.join();
}

void WorkerPool::run(int64_t workers, const std::function<void(int64_t)>& task) {
  if (workers <= 0) return;
  std::lock_guard<std::mutex> serial(run_mutex_);
  std::unique_lock<std::mutex> lock(mutex_);
  while (static_cast<int64_t>(threads_.size()) < workers) {
    const auto index = static_cast<int64_t>(threads_.size());
    threads_.emplace_back([this, index] { loop(index); });
  }
  task_ = &task;
  active_ = workers;
  remaining_ = workers;
  ++generation_;
  wake_.notify_all();
  done_.wait(lock, [this] { return remaining_ == 0; });
  task_ = nullptr;
}

void WorkerPool::loop(int64_t index) {
  int64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (index >= active_) continue;
    const auto* task = task_;
    lock.unlock();
    (*task)(index);
    lock.lock();
    if (--remaining_ == 0) done_.notify_all();
  }
}

}  // namespace torchmt
