#include "serving/metrics.h"

#include <algorithm>
#include <sstream>

#include "torchmt/util/option_table.h"

namespace torchmt {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const auto bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();  // first bound >= value
  ++counts_[static_cast<size_t>(bucket)];
  sum_ += value;
  ++count_;
}

std::string Histogram::prometheus(const std::string& name) const {
  std::ostringstream out;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out << name << "_bucket{le=\"" << real_text(bounds_[i]) << "\"} " << cumulative << "\n";
  }
  out << name << "_bucket{le=\"+Inf\"} " << count_ << "\n";
  out << name << "_sum " << real_text(sum_) << "\n";
  out << name << "_count " << count_ << "\n";
  return out.str();
}

ServiceMetrics::ServiceMetrics()
    : latency_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      batch_sentences_({1, 2, 4, 8, 16, 32, 64, 128, 256, 512}),
      batch_requests_({1, 2, 4, 8, 16, 32, 64, 128}),
      batch_seconds_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      step_rows_({1, 2, 4, 8, 16, 32, 64, 128, 256}) {}

void ServiceMetrics::record_request(const std::string& endpoint, int status, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{endpoint, status}];
  if (seconds >= 0) latency_.observe(seconds);
}

void ServiceMetrics::record_batch(int64_t requests, int64_t sentences, int64_t source_tokens, int64_t target_tokens,
                                  double seconds) {
  record_translated(sentences, source_tokens, target_tokens);
  std::lock_guard<std::mutex> lock(mutex_);
  batch_sentences_.observe(static_cast<double>(sentences));
  batch_requests_.observe(static_cast<double>(requests));
  batch_seconds_.observe(seconds);
}

void ServiceMetrics::record_translated(int64_t sentences, int64_t source_tokens, int64_t target_tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  sentences_ += static_cast<uint64_t>(sentences);
  source_tokens_ += static_cast<uint64_t>(source_tokens);
  target_tokens_ += static_cast<uint64_t>(target_tokens);
}

void ServiceMetrics::record_step(int64_t rows, int64_t joined) {
  std::lock_guard<std::mutex> lock(mutex_);
  step_rows_.observe(static_cast<double>(rows));
  joins_ += static_cast<uint64_t>(joined);
}

void ServiceMetrics::set_queue(const void* queue, int64_t requests, int64_t sentences) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (requests == 0 && sentences == 0)
    queues_.erase(queue);
  else
    queues_[queue] = {requests, sentences};
}

void ServiceMetrics::add_in_flight(int64_t delta) {
  std::lock_guard<std::mutex> lock(mutex_);
  in_flight_ += delta;
}

int64_t ServiceMetrics::batches() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(batch_sentences_.count());
}

double ServiceMetrics::mean_batch_sentences() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return batch_sentences_.count() ? batch_sentences_.sum() / static_cast<double>(batch_sentences_.count()) : 0.0;
}

int64_t ServiceMetrics::steps() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(step_rows_.count());
}

double ServiceMetrics::mean_step_rows() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return step_rows_.count() ? step_rows_.sum() / static_cast<double>(step_rows_.count()) : 0.0;
}

int64_t ServiceMetrics::joins() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(joins_);
}

std::string ServiceMetrics::prometheus() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t queue_requests = 0, queue_sentences = 0;
  for (const auto& [queue, length] : queues_) {
    queue_requests += length.first;
    queue_sentences += length.second;
  }
  std::ostringstream out;
  out << "# HELP torchmt_requests_total HTTP requests answered, by endpoint and status code.\n"
         "# TYPE torchmt_requests_total counter\n";
  for (const auto& [key, count] : requests_)
    out << "torchmt_requests_total{endpoint=\"" << key.first << "\",code=\"" << key.second << "\"} " << count << "\n";
  out << "# HELP torchmt_sentences_total Sentences translated.\n# TYPE torchmt_sentences_total counter\n"
      << "torchmt_sentences_total " << sentences_ << "\n"
      << "# HELP torchmt_source_tokens_total Source tokens translated (pieces + </s>).\n"
         "# TYPE torchmt_source_tokens_total counter\n"
      << "torchmt_source_tokens_total " << source_tokens_ << "\n"
      << "# HELP torchmt_target_tokens_total Target tokens produced (best hypotheses, + </s>).\n"
         "# TYPE torchmt_target_tokens_total counter\n"
      << "torchmt_target_tokens_total " << target_tokens_ << "\n"
      << "# HELP torchmt_request_duration_seconds Time from a request's arrival to its answer.\n"
         "# TYPE torchmt_request_duration_seconds histogram\n"
      << latency_.prometheus("torchmt_request_duration_seconds")
      << "# HELP torchmt_batch_sentences Sentences per batch the dynamic batcher formed.\n"
         "# TYPE torchmt_batch_sentences histogram\n"
      << batch_sentences_.prometheus("torchmt_batch_sentences")
      << "# HELP torchmt_batch_requests Requests per batch the dynamic batcher formed.\n"
         "# TYPE torchmt_batch_requests histogram\n"
      << batch_requests_.prometheus("torchmt_batch_requests")
      << "# HELP torchmt_batch_seconds Decoding time per batch.\n# TYPE torchmt_batch_seconds histogram\n"
      << batch_seconds_.prometheus("torchmt_batch_seconds")
      << "# HELP torchmt_step_rows Sentences per decoding step of in-flight batching.\n"
         "# TYPE torchmt_step_rows histogram\n"
      << step_rows_.prometheus("torchmt_step_rows")
      << "# HELP torchmt_stream_joins_total Sentences that joined a running batch between steps.\n"
         "# TYPE torchmt_stream_joins_total counter\n"
      << "torchmt_stream_joins_total " << joins_ << "\n"
      << "# HELP torchmt_queue_requests Requests waiting for a batch.\n# TYPE torchmt_queue_requests gauge\n"
      << "torchmt_queue_requests " << queue_requests << "\n"
      << "# HELP torchmt_queue_sentences Sentences waiting for a batch.\n# TYPE torchmt_queue_sentences gauge\n"
      << "torchmt_queue_sentences " << queue_sentences << "\n"
      << "# HELP torchmt_requests_in_flight Requests being read, queued, decoded or answered.\n"
         "# TYPE torchmt_requests_in_flight gauge\n"
      << "torchmt_requests_in_flight " << in_flight_ << "\n";
  return out.str();
}

}  // namespace torchmt
