#include "torchmt/serving/translation_service.h"

#include <algorithm>
#include <exception>
#include <map>
#include <optional>

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include "decoding/greedy_stream.h"
#include "torchmt/decoding/reverse_rescoring.h"
#include "serving/metrics.h"
#include "torchmt/util/device.h"
#include "util/thread_team.h"

namespace torchmt {
namespace {

// Jobs that may share a batch: the same search (the rest of the options is the server's).
bool same_search(const TranslationOptions& a, const TranslationOptions& b) {
  return same_choices(a.search, b.search) && a.use_cache == b.use_cache;
}

// Jobs that may share a whole batch: the same search and the same reranking.
bool same_batch(const ServiceJob& a, const ServiceJob& b) {
  return same_search(a.options, b.options) && a.reverse_weight == b.reverse_weight && a.reverse == b.reverse;
}

// What sentence i of a job asks of the search; its sampling stream is its index in the job.
LineSteering line_steering(const ServiceJob& job, size_t i) {
  LineSteering s;
  if (!job.target_prefixes.empty()) s.target_prefix = job.target_prefixes[i];
  if (!job.constraints.empty()) s.constraints = job.constraints[i];
  s.stream = static_cast<int64_t>(i);
  return s;
}

// Target tokens of the best hypotheses, eos included.
int64_t target_tokens(const std::vector<Translation>& translations) {
  int64_t tokens = 0;
  for (const auto& t : translations)
    if (!t.hypotheses.empty()) tokens += static_cast<int64_t>(t.hypotheses.front().tokens.size()) + 1;
  return tokens;
}

// A sentence's tag in a worker's stream: its request's slot and its index in the request.
constexpr int kSentenceBits = 20;
constexpr int64_t kMaxStreamSentences = int64_t{1} << kSentenceBits;

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
  // Decoders made here, not in the workers: making one may touch the shared model.
  if (options_.continuous) {
    for (int64_t w = 0; w < plan_.workers; ++w) {
      auto decoder = translator_.make_decoder(/*use_cache=*/true);
      if (!decoder->can_join()) {
        decoders_.clear();
        break;
      }
      decoders_.push_back(std::move(decoder));
    }
  }
  for (int64_t w = 0; w < plan_.workers; ++w)
    workers_.emplace_back([this, w] { worker_loop(static_cast<size_t>(w)); });
}

TranslationService::~TranslationService() { stop(); }

std::future<ServiceResult> TranslationService::submit(ServiceJob job) {
  if (!job.target_prefixes.empty() && job.target_prefixes.size() != job.sentences.size())
    throw std::invalid_argument(std::to_string(job.target_prefixes.size()) + " target prefixes for " +
                                std::to_string(job.sentences.size()) + " sentences");
  if (!job.constraints.empty() && job.constraints.size() != job.sentences.size())
    throw std::invalid_argument(std::to_string(job.constraints.size()) + " constraint lists for " +
                                std::to_string(job.sentences.size()) + " sentences");
  if (job.reverse_weight != 0) {
    if (job.reverse == nullptr) throw std::invalid_argument("reverse_weight needs a model translating the other way");
    ReverseRescoring{job.reverse_weight, {}}.validate(job.options.search);
  }
  auto pending = std::make_unique<Pending>();
  for (const auto& s : job.sentences) {  // outside the lock: tokenizing
    bool truncated = false;
    pending->ids.push_back(translator_.encode_source(s, &truncated));
    pending->truncated.push_back(truncated);
    pending->tokens += static_cast<int64_t>(pending->ids.back().size());
  }
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
  if (metrics_) metrics_->set_queue(this, 0, 0);  // no queue left to count
}

void TranslationService::publish_queue_locked() {
  if (metrics_) metrics_->set_queue(this, static_cast<int64_t>(queue_.size()), queued_sentences_);
}

namespace {
bool abandoned(const ServiceJob& job) { return job.abandoned && job.abandoned->load(std::memory_order_relaxed); }
}  // namespace

void TranslationService::drop_abandoned_locked() {
  bool dropped = false;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (!abandoned((*it)->job)) {
      ++it;
      continue;
    }
    queued_sentences_ -= static_cast<int64_t>((*it)->job.sentences.size());
    (*it)->promise.set_exception(std::make_exception_ptr(ServiceBusy("the request was abandoned by its caller")));
    it = queue_.erase(it);
    dropped = true;
  }
  if (dropped) publish_queue_locked();
}

bool TranslationService::streamable(const Pending& p) const {
  const auto& o = p.job.options;
  // Constrained sentences take the beam search (a beam of 1 too), which a stream does not run.
  return !decoders_.empty() && o.search.beam_size == 1 && o.search.nbest == 1 && o.use_cache && p.job.reverse_weight == 0 &&
         p.job.constraints.empty() && static_cast<int64_t>(p.job.sentences.size()) < kMaxStreamSentences;
}

std::vector<std::unique_ptr<TranslationService::Pending>> TranslationService::take_batch_locked() {
  // Whole requests like the oldest, in arrival order: this worker's share of them when
  // others are free too, never more than the budget (the oldest always goes).
  // The oldest's job lives on in the batch it is moved to.
  const ServiceJob& key = queue_.front()->job;
  int64_t like = 0;
  for (const auto& p : queue_)
    if (same_batch(p->job, key)) like += static_cast<int64_t>(p->job.sentences.size());
  const int64_t share = (like + idle_workers_ - 1) / std::max<int64_t>(1, idle_workers_);
  --idle_workers_;
  std::vector<std::unique_ptr<Pending>> batch;
  int64_t tokens = 0, sentences = 0;
  for (auto it = queue_.begin(); it != queue_.end() && (batch.empty() || sentences < share);) {
    if (!same_batch((*it)->job, key)) {
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
  return batch;
}

std::vector<std::unique_ptr<TranslationService::Pending>> TranslationService::admit_locked(int64_t rows,
                                                                                           int64_t tokens) {
  std::vector<std::unique_ptr<Pending>> joining;
  const auto now = std::chrono::steady_clock::now();
  int64_t queued = 0;
  bool due = rows == 0;
  for (const auto& p : queue_) {
    if (streamable(*p)) {
      queued += static_cast<int64_t>(p->job.sentences.size());
      due = due || std::chrono::duration<double, std::milli>(now - p->arrived).count() >= options_.max_wait_ms;
    } else if (rows > 0 && std::chrono::duration<double, std::milli>(now - p->arrived).count() > options_.max_wait_ms) {
      return joining;  // drain: the stream ends, then this worker decodes that request
    }
  }
  // A join copies the running batch's cache: into a running batch, requests join together, once
  // the oldest has waited max_wait_ms or they are a quarter of the rows.
  if (!due && queued * 4 < rows) return joining;
  // A burst is split between the workers: each admits its share of what is queued.
  const int64_t share = (queued + plan_.workers - 1) / plan_.workers;
  int64_t taken = 0;
  for (auto it = queue_.begin(); it != queue_.end() && (taken == 0 || taken < share);) {
    if (!streamable(**it)) {
      ++it;
      continue;
    }
    const auto n = static_cast<int64_t>((*it)->job.sentences.size());
    // The first request into an empty stream always goes.
    if (rows > 0 && (rows + n > options_.max_batch_rows || tokens + (*it)->tokens > options_.max_batch_tokens)) break;
    rows += n;
    tokens += (*it)->tokens;
    taken += n;
    queued_sentences_ -= n;
    joining.push_back(std::move(*it));
    it = queue_.erase(it);
  }
  return joining;
}

void TranslationService::worker_loop(size_t worker) {
  // This thread's team for its operations, set once (setting it per call would clear oneDNN's
  // caches each time; translate() leaves a matching team alone).
  set_thread_team(static_cast<int>(plan_.threads_per_worker));
  std::optional<RuntimeScope> kernels;  // the translator's kernel settings, for the steps run here
  if (translator_.runtime()) kernels.emplace(*translator_.runtime());
  // In-flight batching: this worker's running batch and the requests it holds, by slot.
  struct Active {
    std::unique_ptr<Pending> pending;
    std::vector<Translation> translations;
    size_t remaining = 0;
  };
  std::optional<GreedyStream> stream;
  std::optional<AutocastGuard> autocast;
  at::NoGradGuard no_grad;  // grad mode and autocast are per thread
  if (worker < decoders_.size()) {
    stream.emplace(*decoders_[worker]);
    autocast.emplace(translator_.device(), translator_.dtype());
  }
  std::map<int64_t, Active> active;
  int64_t next_slot = 0, live_tokens = 0;
  auto complete = [&](std::map<int64_t, Active>::iterator it) {
    Pending& p = *it->second.pending;
    live_tokens -= p.tokens;
    if (metrics_)
      metrics_->record_translated(static_cast<int64_t>(p.job.sentences.size()), p.tokens,
                                  target_tokens(it->second.translations));
    deliver(p, std::move(it->second.translations));
    active.erase(it);
  };

  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (!stream || stream->empty()) {
      ++idle_workers_;
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      drop_abandoned_locked();
      if (queue_.empty() && !stopping_) {
        --idle_workers_;
        continue;
      }
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
          if (same_batch(p->job, queue_.front()->job)) tokens += p->tokens;
        return tokens;
      };
      wake_.wait_until(lock, deadline, [&] {
        return stopping_ || queue_.empty() || tokens_like_oldest() >= options_.max_batch_tokens;
      });
      drop_abandoned_locked();
      if (queue_.empty()) {
        --idle_workers_;
        continue;
      }
      if (!streamable(*queue_.front())) {
        auto batch = take_batch_locked();
        publish_queue_locked();
        if (!queue_.empty()) wake_.notify_one();  // the rest is another free worker's
        lock.unlock();
        run(batch);
        lock.lock();
        continue;
      }
      --idle_workers_;
    }
    drop_abandoned_locked();
    auto joining = admit_locked(stream->live(), live_tokens);
    if (!joining.empty()) {
      publish_queue_locked();
      if (!queue_.empty()) wake_.notify_one();
    }
    lock.unlock();
    int64_t joined = 0;
    try {
      // Requests with the same search join together: one encoder call for them.
      for (size_t first = 0; first < joining.size();) {
        std::vector<const std::vector<int64_t>*> rows;
        std::vector<int64_t> tags;
        Steering steering;
        const TranslationOptions group = joining[first]->job.options;
        const SearchOptions search = translator_.search_options(group);
        size_t end = first;
        for (; end < joining.size() && same_search(joining[end]->job.options, group); ++end) {
          const int64_t slot = next_slot++;
          Active& a = active[slot];
          a.pending = std::move(joining[end]);
          const Pending& p = *a.pending;
          live_tokens += p.tokens;
          a.translations.resize(p.job.sentences.size());
          for (size_t i = 0; i < p.job.sentences.size(); ++i) {
            if (Translator::is_blank(p.job.sentences[i])) {
              translator_.finish(a.translations[i]);  // empty in, empty out
              continue;
            }
            rows.push_back(&p.ids[i]);
            tags.push_back(slot << kSentenceBits | static_cast<int64_t>(i));
            // A request's sentence i samples from stream i, whatever it shares a batch with.
            steering.push_back(translator_.steer(p.ids[i], line_steering(p.job, i), static_cast<int64_t>(i)));
            ++a.remaining;
          }
          if (a.remaining == 0) complete(active.find(slot));
        }
        if (!rows.empty()) {
          if (!stream->empty()) joined += static_cast<int64_t>(rows.size());  // into a running batch
          stream->join(translator_.source_batch(rows), tags, search, steering);
        }
        first = end;
      }
      bool cut = false;
      for (const auto& [slot, a] : active) cut = cut || abandoned(a.pending->job);
      if (cut)
        stream->end_early([&](int64_t tag) {
          const auto it = active.find(tag >> kSentenceBits);
          return it != active.end() && abandoned(it->second.pending->job);
        });
      const int64_t rows = stream->live();
      stream->step();
      if (metrics_ && rows > 0) metrics_->record_step(rows, joined);
      for (auto& [tag, hypothesis] : stream->take_finished()) {
        auto it = active.find(tag >> kSentenceBits);
        Active& a = it->second;
        const auto i = static_cast<size_t>(tag & (kMaxStreamSentences - 1));
        Translation& t = a.translations[i];
        t.hypotheses.push_back(std::move(hypothesis));
        t.truncated = a.pending->truncated[i];
        translator_.finish(t);
        if (--a.remaining == 0) complete(it);
      }
    } catch (...) {
      for (auto& [slot, a] : active) a.pending->promise.set_exception(std::current_exception());
      for (auto& p : joining)
        if (p) p->promise.set_exception(std::current_exception());  // not yet in the stream
      active.clear();
      live_tokens = 0;
      stream.emplace(*decoders_[worker]);  // the next join starts the decoder afresh
    }
    lock.lock();
  }
}

void TranslationService::run(std::vector<std::unique_ptr<Pending>>& batch) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> lines;
  std::vector<LineSteering> steering;
  int64_t source_tokens = 0;
  for (const auto& p : batch) {
    lines.insert(lines.end(), p->job.sentences.begin(), p->job.sentences.end());
    for (size_t i = 0; i < p->job.sentences.size(); ++i) steering.push_back(line_steering(p->job, i));
    source_tokens += p->tokens;
  }
  TranslationOptions options = batch.front()->job.options;
  // The whole batch on this worker (its threads were set when it started).
  options.workers = 1;
  options.threads_per_worker = plan_.threads_per_worker;
  options.batch_size = std::max<int64_t>(options.batch_size, static_cast<int64_t>(lines.size()));
  options.batch_source_tokens = 0;
  // Once every request of the batch has been abandoned (its caller's deadline passed), the search
  // stops at its next step: nobody waits for its result.
  options.search.stop = StopCheck([&batch] {
    return std::all_of(batch.begin(), batch.end(), [](const auto& p) { return abandoned(p->job); });
  });
  std::vector<Translation> translations;
  try {
    const ServiceJob& job = batch.front()->job;
    translations = job.reverse_weight > 0
                       ? translate_rescored(translator_, *job.reverse, job.reverse_weight, lines, options, {}, steering)
                       : translator_.translate(lines, options, {}, steering);
  } catch (...) {
    for (auto& p : batch) p->promise.set_exception(std::current_exception());
    return;
  }
  if (metrics_) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    metrics_->record_batch(static_cast<int64_t>(batch.size()), static_cast<int64_t>(lines.size()), source_tokens,
                           target_tokens(translations), seconds);
  }
  size_t offset = 0;
  for (auto& p : batch) {
    const size_t n = p->job.sentences.size();
    deliver(*p, std::vector<Translation>(std::make_move_iterator(translations.begin() + static_cast<std::ptrdiff_t>(offset)),
                                         std::make_move_iterator(translations.begin() +
                                                                 static_cast<std::ptrdiff_t>(offset + n))));
    offset += n;
  }
}

void TranslationService::deliver(Pending& p, std::vector<Translation> translations) {
  try {
    ServiceResult result;
    result.translations = std::move(translations);
    if (p.job.attention) {
      for (size_t i = 0; i < result.translations.size(); ++i) {
        const auto& t = result.translations[i];
        result.attention.push_back(t.hypotheses.empty()
                                       ? AttentionMap{}
                                       : cross_attention_map(translator_, p.job.sentences[i], t.hypotheses.front().tokens,
                                                             p.job.attention_layer, p.job.attention_head));
      }
    }
    if (p.job.alignments) {
      std::vector<std::vector<int64_t>> targets;
      for (const auto& t : result.translations)
        targets.push_back(t.hypotheses.empty() ? std::vector<int64_t>{} : t.hypotheses.front().tokens);
      result.alignments = align_words(translator_, p.job.sentences, targets, p.job.alignment_options);
    }
    if (p.job.confidence) {
      TranslationOptions scoring = p.job.options;
      scoring.workers = 1;  // on this worker's thread, as its translation ran
      scoring.threads_per_worker = plan_.threads_per_worker;
      static const ConfidenceModel raw;
      result.confidence = rate_translations(translator_, p.job.sentences, result.translations, scoring,
                                            p.job.confidence_model ? *p.job.confidence_model : raw);
    }
    p.promise.set_value(std::move(result));
  } catch (...) {
    p.promise.set_exception(std::current_exception());
  }
}

}  // namespace torchmt
