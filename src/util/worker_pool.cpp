#include "util/worker_pool.h"

#include <algorithm>

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
  Call call{&task, workers, {}, {}};
  std::unique_lock<std::mutex> lock(mutex_);
  while (static_cast<int64_t>(threads_.size()) < workers) {
    const size_t thread = threads_.size();
    threads_.emplace_back([this, thread] { loop(thread); });
  }
  for (int64_t w = 0; w < workers; ++w) queue_.push_back({&call, w});
  wake_.notify_all();
  call.done.wait(lock, [&] { return call.remaining == 0; });
}

void WorkerPool::loop(size_t thread) {
  // The first queued task of a call this thread has not served: a call's tasks run side by side
  // on as many threads, never one after another on one.
  auto next = [&] {
    return std::find_if(queue_.begin(), queue_.end(), [&](const Item& item) {
      const auto& served = item.call->threads;
      return std::find(served.begin(), served.end(), thread) == served.end();
    });
  };
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || next() != queue_.end(); });
    // Found again here: an iterator kept from an earlier look may be stale (the queue changed).
    const auto it = next();
    if (it == queue_.end()) return;  // stopping, and nothing left this thread may run
    const Item item = *it;
    queue_.erase(it);
    item.call->threads.push_back(thread);
    lock.unlock();
    (*item.call->task)(item.index);
    lock.lock();
    // The caller may return (and drop `call`) once it sees zero: notify under the lock.
    if (--item.call->remaining == 0) item.call->done.notify_all();
  }
}

}  // namespace torchmt
