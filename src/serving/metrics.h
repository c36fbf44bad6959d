#pragma once
// The server's counters in Prometheus' text format (GET /metrics): requests by endpoint and
// status, sentences and tokens translated, the batch sizes the dynamic batcher formed, request
// latency, and the queue. Thread-safe; cheap enough to update on every request.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace torchmt {

// A cumulative histogram with fixed upper bounds (Prometheus' `le` buckets, +Inf implied).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // name_bucket{le="..."} lines, name_sum and name_count.
  std::string prometheus(const std::string& name) const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), the last for +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class ServiceMetrics {
 public:
  ServiceMetrics();
  void record_request(const std::string& endpoint, int status, double seconds);  // seconds < 0: not timed
  void record_batch(int64_t requests, int64_t sentences, int64_t source_tokens, int64_t target_tokens,
                    double seconds);
  // In-flight batching: one decoding step of `rows` sentences; `joined` sentences entered the
  // running batch before it.
  void record_step(int64_t rows, int64_t joined);
  // Sentences finished outside a batch (in-flight batching), for the totals.
  void record_translated(int64_t sentences, int64_t source_tokens, int64_t target_tokens);
  // One queue's present length (a direction's TranslationService each, keyed by its address; 0, 0
  // when it stops); the gauges are the sum over the queues.
  void set_queue(const void* queue, int64_t requests, int64_t sentences);
  void add_in_flight(int64_t delta);
  std::string prometheus() const;

  // For tests and the load benchmark.
  int64_t batches() const;
  double mean_batch_sentences() const;
  int64_t steps() const;
  double mean_step_rows() const;
  int64_t joins() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // (endpoint, status) -> count
  uint64_t sentences_ = 0, source_tokens_ = 0, target_tokens_ = 0;
  Histogram latency_, batch_sentences_, batch_requests_, batch_seconds_, step_rows_;
  uint64_t joins_ = 0;
  std::map<const void*, std::pair<int64_t, int64_t>> queues_;  // queue -> (requests, sentences)
  int64_t in_flight_ = 0;
};

}  // namespace torchmt
