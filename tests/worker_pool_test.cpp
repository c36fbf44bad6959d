// WorkerPool: every task runs once on its own thread, the threads are kept between runs.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "util/worker_pool.h"

namespace torchmt {
namespace {

TEST(WorkerPool, RunsEachTaskOnceOnItsOwnKeptThread) {
  WorkerPool pool;
  std::mutex mutex;
  std::set<std::thread::id> first, later;
  for (int run = 0; run < 20; ++run) {
    std::vector<int> calls(3, 0);
    std::atomic<int> inside{0}, most{0};
    pool.run(3, [&](int64_t w) {
      const int now = ++inside;
      for (int seen = most; now > seen && !most.compare_exchange_weak(seen, now);) {
      }
      // Waits for company (up to 2 s): a fixed 2 ms was too short for a thread to start under the
      // sanitizers on a busy 2-core machine.
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (most < 2 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      std::lock_guard<std::mutex> lock(mutex);
      ++calls[static_cast<size_t>(w)];
      (run == 0 ? first : later).insert(std::this_thread::get_id());
      --inside;
    });
    EXPECT_EQ(calls, std::vector<int>({1, 1, 1})) << "run " << run;
    EXPECT_GE(most, 2) << "run " << run;  // the tasks overlap: they run in parallel
  }
  EXPECT_EQ(first.size(), 3u);
  EXPECT_EQ(later, first);  // no new threads after the first run
  EXPECT_FALSE(first.count(std::this_thread::get_id()));
  pool.run(1, [&](int64_t w) { EXPECT_EQ(w, 0); });  // fewer workers than threads
  pool.run(0, [&](int64_t) { ADD_FAILURE(); });
}

// Calls from several threads at once share the threads (a Python program's threads on one
// Translator): every call gets its tasks run, and calls overlap instead of queueing whole.
TEST(WorkerPool, CallsFromSeveralThreadsShareItsThreads) {
  WorkerPool pool;
  std::atomic<int> inside{0}, most{0}, calls{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&] {
      for (int run = 0; run < 5; ++run)
        pool.run(1, [&](int64_t w) {
          EXPECT_EQ(w, 0);
          const int now = ++inside;
          for (int seen = most; now > seen && !most.compare_exchange_weak(seen, now);) {
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          ++calls;
          --inside;
        });
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(calls, 20);
  EXPECT_EQ(most, 1);  // one thread started (each call asks one worker): they run one at a time
  pool.run(2, [&](int64_t) { std::this_thread::sleep_for(std::chrono::milliseconds(1)); });
  inside = most = 0;
  callers.clear();
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&] {
      for (int run = 0; run < 5; ++run)
        pool.run(1, [&](int64_t) {
          const int now = ++inside;
          for (int seen = most; now > seen && !most.compare_exchange_weak(seen, now);) {
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          --inside;
        });
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(most, 2);  // two threads now: two calls at a time, never more
}

}  // namespace
}  // namespace torchmt
