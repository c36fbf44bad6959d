#include "torchmt/serving/translation_service.h"

#include <algorithm>
#include <exception>

#include <ATen/Parallel.h>

#include "torchmt/serving/metrics.h"

namespace torchmt {
namespace {

// Jobs that may share a batch: the same search (the rest of the options is the server's).
bool same_search(const TranslationOptions& a, const TranslationOptions& b) {
  const auto &x = a.search, &y = b.search;
  return x.beam_size == y.beam_size && x.length_penalty == y.length_penalty && x.max_len_a == y.max_len_a &&
         x.max_len_b == y.max_len_b && x.max_len_cap == y.max_len_cap && x.nbest == y.nbest &&
         a.use_cache == b.use_cache;
}

}  // namespace

TranslationService::TranslationService(Translator& translator, ServiceOptions options, ServiceMetrics* metrics)
    : translator_(translator), options_(options), metrics_(metrics) {
  // The workers call translate() at once: the model goes to eval mode here, before they start,
  // so that they only read its mode.
  if (translator_.model()) translator_.model()->eval();
  TranslationOptions wanted;
  wanted.workers = options_.workers;
  wanted.threads_per_worker = options_.threads_per_worker;
  plan_ = translator_.plan_workers(wanted, size_t{1} << 20);  // as many batches as it likes
  for (int64_t w = 0; w < plan_.workers; ++w) workers_.emplace_back([this] { worker_loop(); });
}

TranslationService::~TranslationService() { stop(); }

int64_t TranslationService::source_tokens(const std::string& sentence) const {
  return static_cast<int64_t>(translator_.encode_source(sentence).size());
}

std::future<ServiceResult> TranslationService::submit(ServiceJob job) {
  auto pending = std::make_unique<Pending>();
  for (const auto& s : job.sentences) pending->tokens += source_tokens(s);  // outside the lock: tokenizing
  pending->job = std::move(job);
  pending->arrived = std::chrono::steady_clock::now();
  auto future = pending->promise.get_future();
  if (pending->job.sentences.empty()) {
    pending->promise.set_value(ServiceResult{});
    return future;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw ServiceBusy("the server is shutting down");
    const auto n = static_cast<int64_t>(pending->job.sentences.size());
    if (queued_sentences_ + n > options_.max_queue_sentences)
      throw ServiceBusy("the translation queue is full (" + std::to_string(queued_sentences_) +
                        " sentences waiting); try again later");
    queued_sentences_ += n;
    queue_.push_back(std::move(pending));
    publish_queue_locked();
  }
  wake_.notify_one();
  return future;
}

void TranslationService::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_)
    if (w.joinable()) w.join();
}

void TranslationService::publish_queue_locked() {
  if (metrics_) metrics_->set_queue(static_cast<int64_t>(queue_.size()), queued_sentences_);
}

void TranslationService::worker_loop() {
  // This thread's team for its operations, set once (setting it per call would clear oneDNN's
  // caches each time; translate() leaves a matching team alone).
  at::set_num_threads(static_cast<int>(plan_.threads_per_worker));
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    ++idle_workers_;
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) {
      --idle_workers_;
      return;  // stopping, and everything queued is done
    }
    // The oldest request and its arrival; it may be taken by another worker while this one
    // waits, so its time is copied and the queue is looked at again after the wait.
    const auto deadline =
        queue_.front()->arrived + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                      std::chrono::duration<double, std::milli>(options_.max_wait_ms));
    auto tokens_like_oldest = [&] {
      int64_t tokens = 0;
      for (const auto& p : queue_)
        if (same_search(p->job.options, queue_.front()->job.options)) tokens += p->tokens;
      return tokens;
    };
    wake_.wait_until(lock, deadline, [&] {
      return stopping_ || queue_.empty() || tokens_like_oldest() >= options_.max_batch_tokens;
    });
    if (queue_.empty()) {
      --idle_workers_;
      continue;
    }
    // Whole requests like the oldest, in arrival order: this worker's share of them when
    // others are free too, never more than the budget (the oldest always goes).
    const TranslationOptions key = queue_.front()->job.options;
    int64_t like = 0;
    for (const auto& p : queue_)
      if (same_search(p->job.options, key)) like += static_cast<int64_t>(p->job.sentences.size());
    const int64_t share = (like + idle_workers_ - 1) / std::max<int64_t>(1, idle_workers_);
    --idle_workers_;
    std::vector<std::unique_ptr<Pending>> batch;
    int64_t tokens = 0, sentences = 0;
    for (auto it = queue_.begin(); it != queue_.end() && (batch.empty() || sentences < share);) {
      if (!same_search((*it)->job.options, key)) {
        ++it;
        continue;
      }
      if (!batch.empty() && tokens + (*it)->tokens > options_.max_batch_tokens) break;
      tokens += (*it)->tokens;
      sentences += static_cast<int64_t>((*it)->job.sentences.size());
      queued_sentences_ -= static_cast<int64_t>((*it)->job.sentences.size());
      batch.push_back(std::move(*it));
      it = queue_.erase(it);
    }
    publish_queue_locked();
    if (!queue_.empty()) wake_.notify_one();  // the rest is another free worker's
    lock.unlock();
    run(batch);
    lock.lock();
  }
}

void TranslationService::run(std::vector<std::unique_ptr<Pending>>& batch) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> lines;
  int64_t source_tokens = 0;
  for (const auto& p : batch) {
    lines.insert(lines.end(), p->job.sentences.begin(), p->job.sentences.end());
    source_tokens += p->tokens;
  }
  TranslationOptions options = batch.front()->job.options;
  // The whole batch on this worker (its threads were set when it started).
  options.workers = 1;
  options.threads_per_worker = plan_.threads_per_worker;
  options.batch_size = std::max<int64_t>(options.batch_size, static_cast<int64_t>(lines.size()));
  options.batch_source_tokens = 0;
  std::vector<Translation> translations;
  try {
    translations = translator_.translate(lines, options);
  } catch (...) {
    for (auto& p : batch) p->promise.set_exception(std::current_exception());
    return;
  }
  int64_t target_tokens = 0;
  for (const auto& t : translations)
    if (!t.hypotheses.empty()) target_tokens += static_cast<int64_t>(t.hypotheses.front().tokens.size()) + 1;
  if (metrics_) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    metrics_->record_batch(static_cast<int64_t>(batch.size()), static_cast<int64_t>(lines.size()), source_tokens,
                           target_tokens, seconds);
  }
  size_t offset = 0;
  for (auto& p : batch) {
    const size_t n = p->job.sentences.size();
    try {
      ServiceResult result;
      result.translations.assign(std::make_move_iterator(translations.begin() + static_cast<std::ptrdiff_t>(offset)),
                                 std::make_move_iterator(translations.begin() + static_cast<std::ptrdiff_t>(offset + n)));
      if (p->job.attention) {
        for (size_t i = 0; i < n; ++i) {
          const auto& t = result.translations[i];
          result.attention.push_back(t.hypotheses.empty()
                                         ? AttentionMap{}
                                         : cross_attention_map(translator_, p->job.sentences[i], t.hypotheses.front().tokens,
                                                               p->job.attention_layer, p->job.attention_head));
        }
      }
      p->promise.set_value(std::move(result));
    } catch (...) {
      p->promise.set_exception(std::current_exception());
    }
    offset += n;
  }
}

}  // namespace torchmt
