#pragma once
// Dynamic batching for a server: requests from many threads are queued and packed into
// token-budget batches across requests, decoded by one Translator (its worker pool and
// precision, the same as `torchmt translate`), and each request gets its own answer back.
//
// `workers` threads (CTranslate2's inter_threads; each with `threads_per_worker` threads inside
// its operations): a free worker waits for the oldest queued request, then up to `max_wait_ms`
// from that request's arrival for company (or until the queued source tokens reach
// `max_batch_tokens`), and takes whole requests with the same search settings in arrival order:
// its share of them when other workers are free too (so that a burst keeps every worker busy),
// at most the budget. It decodes them as one batch while the other workers take the next ones,
// so no worker waits for another's batch to end.
//
// In-flight ("continuous") batching, on by default where the decoder can add rows to a running
// batch (native and int8 models; not TorchScript exports): greedy requests with the KV cache do
// not wait for a batch to end. Each worker runs one GreedyStream; between two decoding steps it
// admits queued greedy requests (its share of them, up to `max_batch_rows` live sentences and
// `max_batch_tokens` live source tokens) and answers each request as soon as its last sentence
// ends, so a step always carries about clients / workers sentences instead of the few that are
// left of a batch's longest one. Other requests (beam search, no cache) are decoded as whole
// batches, as above, by a worker whose stream is empty; once one of them has waited
// `max_wait_ms`, streams admit nothing more until they drain, so it is never starved.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "torchmt/decoding/attention_svg.h"
#include "torchmt/decoding/confidence.h"
#include "torchmt/decoding/translator.h"
#include "torchmt/decoding/word_aligner.h"

namespace torchmt {

class ServiceMetrics;

struct ServiceOptions {
  int64_t workers = 0;              // batches decoded at once; 0 = the Translator's plan (a worker per core, 1 on CUDA)
  int64_t threads_per_worker = 0;   // threads inside each worker's operations; 0 = the plan's
  int64_t max_batch_tokens = 4096;  // source tokens (pieces + </s>) per batch, summed over its sentences
  double max_wait_ms = 5;           // how long the oldest request waits for others to share its batch
  int64_t max_queue_sentences = 8192;  // beyond this, submit() refuses (the server answers 503)
  bool continuous = true;           // in-flight batching of greedy requests where the decoder can join rows
  int64_t max_batch_rows = 64;      // sentences in a worker's running batch (in-flight batching)
};

struct ServiceJob {
  std::vector<std::string> sentences;
  TranslationOptions options;
  bool attention = false;  // also each sentence's cross-attention (native models)
  int64_t attention_layer = -1, attention_head = -1;
  bool alignments = false;  // also each sentence's word alignment (native models)
  AlignmentOptions alignment_options = {};
  std::vector<std::string> target_prefixes = {};  // one per sentence, or none
  std::vector<std::vector<std::string>> constraints = {};  // each sentence's target phrases, or none
  bool confidence = false;  // also each sentence's confidence
  std::shared_ptr<const ConfidenceModel> confidence_model = {};  // its calibration; null: the raw estimate
  // Above 0: the beam reranked with `reverse` (decoding/reverse_rescoring.h), which translates
  // the other way and must outlive the job; it may be the service's own translator.
  double reverse_weight = 0;
  Translator* reverse = nullptr;
  // Set by a caller that stopped waiting (a request past its deadline): its queued sentences are
  // dropped and its sentences in a running greedy stream end at the next step (a whole batch,
  // beam search's, runs to its end).
  std::shared_ptr<const std::atomic<bool>> abandoned = {};
};

struct ServiceResult {
  std::vector<Translation> translations;  // one per sentence, in order
  std::vector<AttentionMap> attention;    // one per sentence when asked (empty map for an empty line)
  std::vector<WordAlignment> alignments;  // one per sentence when asked
  std::vector<SentenceConfidence> confidence;  // one per sentence when asked (no words for an empty line)
};

// The service cannot take a job now (queue full, shutting down): the server's 503.
class ServiceBusy : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class TranslationService {
 public:
  // `translator` and `metrics` (may be null) must outlive the service.
  TranslationService(Translator& translator, ServiceOptions options, ServiceMetrics* metrics = nullptr);
  ~TranslationService();  // stop()
  TranslationService(const TranslationService&) = delete;
  TranslationService& operator=(const TranslationService&) = delete;

  // Queues a job; the future holds its result or the exception its decoding threw
  // (std::invalid_argument for an attention layer/head out of range). Throws ServiceBusy when
  // the queue is full or after stop().
  std::future<ServiceResult> submit(ServiceJob job);

  // Refuses new jobs, finishes every queued one, joins the workers. Idempotent.
  void stop();

  // The workers and threads it runs.
  WorkerPlan plan() const { return plan_; }
  // Whether greedy requests use in-flight batching (options.continuous and a decoder that joins).
  bool continuous() const { return !decoders_.empty(); }

 private:
  struct Pending {
    ServiceJob job;
    std::vector<std::vector<int64_t>> ids;  // per sentence, as Translator::encode_source gives them
    std::vector<char> truncated;
    int64_t tokens = 0;
    std::chrono::steady_clock::time_point arrived;
    std::promise<ServiceResult> promise;
  };
  void worker_loop(size_t worker);
  // The whole-batch path: whole requests like the oldest queued one (the caller holds the lock
  // and was counted idle; this uncounts it).
  std::vector<std::unique_ptr<Pending>> take_batch_locked();
  void run(std::vector<std::unique_ptr<Pending>>& batch);
  // In-flight batching: whether a request may join a stream, and which queued ones join one
  // that has `rows` live sentences of `tokens` source tokens.
  bool streamable(const Pending& p) const;
  std::vector<std::unique_ptr<Pending>> admit_locked(int64_t rows, int64_t tokens);
  // Attention maps when asked, then the answer.
  void deliver(Pending& p, std::vector<Translation> translations);
  void publish_queue_locked();
  // Queued jobs whose caller has gone (ServiceJob::abandoned) leave the queue, their promise told.
  void drop_abandoned_locked();

  Translator& translator_;
  ServiceOptions options_;
  ServiceMetrics* metrics_;
  WorkerPlan plan_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Pending>> queue_;
  int64_t queued_sentences_ = 0;
  int64_t idle_workers_ = 0;  // workers waiting for a batch
  bool stopping_ = false;
  std::vector<std::unique_ptr<IncrementalDecoder>> decoders_;  // one per worker with in-flight batching
  std::vector<std::thread> workers_;
};

}  // namespace torchmt
