#include "torchmt/serving/translation_service.h"

#include <algorithm>
#include <exception>

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
  dispatcher_ = std::thread([this] { dispatch_loop(); });
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
    if (stopping_) throw std::runtime_error("the server is shutting down");
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
  if (dispatcher_.joinable()) dispatcher_.join();
}

void TranslationService::publish_queue_locked() {
  if (metrics_) metrics_->set_queue(static_cast<int64_t>(queue_.size()), queued_sentences_);
}

void TranslationService::dispatch_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued is done
    // Only this thread removes from the queue, so the oldest stays where it is while we wait.
    const Pending* oldest = queue_.front().get();
    auto tokens_like_oldest = [&] {
      int64_t tokens = 0;
      for (const auto& p : queue_)
        if (same_search(p->job.options, oldest->job.options)) tokens += p->tokens;
      return tokens;
    };
    const auto deadline =
        oldest->arrived + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double, std::milli>(options_.max_wait_ms));
    wake_.wait_until(lock, deadline,
                     [&] { return stopping_ || tokens_like_oldest() >= options_.max_batch_tokens; });
    // Whole requests in arrival order, up to the budget (the oldest always goes).
    std::vector<std::unique_ptr<Pending>> batch;
    int64_t tokens = 0;
    const TranslationOptions key = oldest->job.options;
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (!same_search((*it)->job.options, key)) {
        ++it;
        continue;
      }
      if (!batch.empty() && tokens + (*it)->tokens > options_.max_batch_tokens) break;
      tokens += (*it)->tokens;
      queued_sentences_ -= static_cast<int64_t>((*it)->job.sentences.size());
      batch.push_back(std::move(*it));
      it = queue_.erase(it);
    }
    publish_queue_locked();
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
  // One batch per worker: the job is split evenly so that every core has a share of it.
  if (options.batch_source_tokens == 0) {
    const auto workers = translator_.plan_workers(options, lines.size()).workers;
    const auto n = static_cast<int64_t>(lines.size());
    options.batch_size = std::max<int64_t>(1, std::min(options.batch_size, (n + workers - 1) / workers));
  }
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
