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
  Call call{&task, workers, {}};
  std::unique_lock<std::mutex> lock(mutex_);
  while (static_cast<int64_t>(threads_.size()) < workers) threads_.emplace_back([this] { loop(); });
  for (int64_t w = 0; w < workers; ++w) queue_.push_back({&call, w});
  wake_.notify_all();
  call.done.wait(lock, [&] { return call.remaining == 0; });
}

void WorkerPool::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to run
    const Item item = queue_.front();
    queue_.pop_front();
    lock.unlock();
    (*item.call->task)(item.index);
    lock.lock();
    // The caller may return (and drop `call`) once it sees zero: notify under the lock.
    if (--item.call->remaining == 0) item.call->done.notify_all();
  }
}

}  // namespace torchmt
