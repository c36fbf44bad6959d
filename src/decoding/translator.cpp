#include "torchmt/decoding/translator.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <numeric>
#include <optional>

#include <ATen/Parallel.h>

#include <torch/torch.h>

#include "data/shortlist.h"
#include "decoding/output_languages.h"
#include "torchmt/data/special_ids.h"
#include "torchmt/decoding/forced_decoding.h"
#include "decoding/transformer_decoder.h"
#include "model/linear.h"
#include "model/masks.h"
#include "torchmt/util/device.h"
#include "util/thread_team.h"
#include "util/worker_pool.h"

namespace torchmt {

Translator::Translator(Transformer model, Tokenizer src_tokenizer, Tokenizer tgt_tokenizer, c10::Device device,
                       c10::ScalarType dtype)
    : model_(std::move(model)),
      config_(model_->config()),
      src_tok_(std::move(src_tokenizer)),
      tgt_tok_(std::move(tgt_tokenizer)),
      device_(device),
      dtype_(dtype),
      cpu_threads_(at::get_num_threads()),
      pool_(std::make_shared<WorkerPool>()) {
  make_decoder_ = [model = model_, outputs = std::make_shared<RestrictedOutputs>()](
                     bool use_cache) mutable -> std::unique_ptr<IncrementalDecoder> {
    // Only a model in training mode (the trainer validating) is written to: concurrent
    // translate() calls (a server's workers) on a model in eval mode only read the flag.
    if (model->is_training()) model->eval();
    return std::make_unique<TransformerDecoder>(model, use_cache, outputs);
  };
  output_languages_ = open_columns_only();
}

Translator::Translator(DecoderFactory make_decoder, ModelConfig config, Tokenizer src_tokenizer,
                       Tokenizer tgt_tokenizer, c10::Device device, c10::ScalarType dtype)
    : make_decoder_(std::move(make_decoder)),
      config_(std::move(config)),
      src_tok_(std::move(src_tokenizer)),
      tgt_tok_(std::move(tgt_tokenizer)),
      device_(device),
      dtype_(dtype),
      cpu_threads_(at::get_num_threads()),
      pool_(std::make_shared<WorkerPool>()) {}

std::vector<int64_t> Translator::encode_source(const std::string& line, bool* truncated) const {
  auto ids = src_tok_.encode(line);
  const auto limit = static_cast<size_t>(config_.max_positions - 1);
  const bool cut = ids.size() > limit;
  if (cut) ids.resize(limit);
  if (truncated) *truncated = cut;
  ids.push_back(config_.eos_id);
  return ids;
}

WorkerPlan Translator::plan_workers(const TranslationOptions& options, size_t batches) const {
  WorkerPlan plan;
  if (device_.is_cuda()) {
    // One stream: parallel batches would only queue behind each other on the GPU.
    plan.workers = std::max<int64_t>(1, options.workers);
    plan.threads_per_worker = std::max<int64_t>(1, options.threads_per_worker);
    return plan;
  }
  const auto jobs = static_cast<int64_t>(std::max<size_t>(1, batches));
  if (const int64_t fixed = runtime_ ? runtime_->inter_threads : 0; fixed > 0) {
    plan.workers = std::min(fixed, options.workers > 0 ? std::min(options.workers, jobs) : jobs);
    plan.threads_per_worker =
        runtime_->intra_threads > 0 ? runtime_->intra_threads : std::max<int64_t>(1, cpu_threads_ / fixed);
    return plan;
  }
  // Auto: one single-threaded worker per core, as many as there are batches; the cores left
  // over go to the workers' own threads, so a lone batch (one sentence from a terminal) gets
  // every core. A worker per core beat or matched one worker with every core's thread
  // (tools/bench/DECISIONS.md).
  plan.workers = options.workers > 0 ? options.workers : std::max<int64_t>(1, std::min(cpu_threads_, jobs));
  plan.threads_per_worker = options.threads_per_worker > 0
                                ? options.threads_per_worker
                                : std::max<int64_t>(1, cpu_threads_ / plan.workers);
  return plan;
}

void Translator::set_cpu_threads(int64_t n) {
  if (n < 1) throw std::invalid_argument("a translator on " + std::to_string(n) + " CPU threads (at least 1)");
  cpu_threads_ = n;
}

void Translator::set_runtime(const Runtime& runtime) {
  runtime.validate();
  runtime_ = runtime;
  // Decoders are made by each call; making the first one puts a native model in eval mode,
  // which must happen before several threads share it.
  if (runtime.inter_threads > 0) (void)make_decoder_(true);
}

std::vector<Translation> Translator::translate(const std::vector<std::string>& lines,
                                               const TranslationOptions& options,
                                               const std::function<void(int64_t)>& done,
                                               const std::vector<LineSteering>& steering) {
  if (!steering.empty() && steering.size() != lines.size())
    throw std::invalid_argument("translate: " + std::to_string(steering.size()) + " steerings for " +
                                std::to_string(lines.size()) + " lines");
  std::vector<Translation> out(lines.size());
  std::vector<std::vector<int64_t>> sources(lines.size());
  std::vector<size_t> order;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (is_blank(lines[i])) continue;  // empty in, empty out
    sources[i] = encode_source(lines[i], &out[i].truncated);
    order.push_back(i);
  }
  // Output kept to a language (OutputLanguages): each batch goes one way, so its rows share one
  // output restriction.
  std::vector<int> ways;
  if (output_languages_) {
    ways.assign(lines.size(), 0);
    for (size_t i : order) ways[i] = output_languages_->way(sources[i]);
  }
  const auto batches = make_batches(sources, order, options, ways);
  if (done && order.size() < lines.size()) done(static_cast<int64_t>(lines.size() - order.size()));  // blank lines
  const SearchOptions search = search_options(options);
  run_batches(options, batches.size(), [&](IncrementalDecoder& decoder, size_t b) {
    const auto [begin, end] = batches[b];
    std::vector<const std::vector<int64_t>*> rows;
    Steering steer_rows;
    const bool steered = !steering.empty() || restricts_output() || search.sampling();
    for (size_t r = begin; r < end; ++r) {
      const size_t line = order[r];
      rows.push_back(&sources[line]);
      if (!steered) continue;
      const LineSteering asked = steering.empty() ? LineSteering{} : steering[line];
      steer_rows.push_back(
          steer(sources[line], asked, asked.stream >= 0 ? asked.stream : options.first_line + static_cast<int64_t>(line)));
    }
    auto result = torchmt::search(decoder, source_batch(rows), search, steer_rows);
    for (size_t r = begin; r < end; ++r) {
      Translation& t = out[order[r]];
      t.hypotheses = std::move(result[r - begin]);
      if (steered && steer_rows[r - begin].prefix_cut) t.truncated = true;
      finish(t);
    }
    if (done) done(static_cast<int64_t>(end - begin));
  });
  for (auto& t : out)
    if (t.texts.empty()) finish(t);  // the blank lines
  return out;
}

std::vector<std::pair<size_t, size_t>> Translator::make_batches(const std::vector<std::vector<int64_t>>& sources,
                                                                std::vector<size_t>& order,
                                                                const TranslationOptions& options,
                                                                const std::vector<int>& ways) {
  // Longest first: similar lengths share a batch, memory peaks early, and the workers take the
  // slowest batches first, so none is left alone with a long one at the end.
  const auto way = [&](size_t line) { return ways.empty() ? 0 : ways[line]; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return way(a) != way(b) ? way(a) < way(b) : sources[a].size() > sources[b].size();
  });
  std::vector<std::pair<size_t, size_t>> batches;  // [begin, end) ranges of `order`
  for (size_t begin = 0; begin < order.size();) {
    const int64_t longest = static_cast<int64_t>(sources[order[begin]].size());
    size_t end = begin;
    while (end < order.size() && way(order[end]) == way(order[begin])) {
      const auto rows = static_cast<int64_t>(end - begin + 1);
      if (options.batch_source_tokens > 0 ? rows * longest > options.batch_source_tokens && end > begin
                                          : rows > std::max<int64_t>(1, options.batch_size))
        break;
      ++end;
    }
    batches.emplace_back(begin, end);
    begin = end;
  }
  // The groups' batches among each other, longest first again.
  std::stable_sort(batches.begin(), batches.end(), [&](const auto& a, const auto& b) {
    return sources[order[a.first]].size() > sources[order[b.first]].size();
  });
  return batches;
}

void Translator::run_batches(const TranslationOptions& options, size_t batches,
                             const std::function<void(IncrementalDecoder&, size_t)>& run_batch) {
  const WorkerPlan plan = plan_workers(options, batches);
  // Decoders are made here, one per worker, not in the workers: making one may touch the
  // shared model (eval() of a model in training mode), which must not happen from two threads
  // at once.
  std::vector<std::unique_ptr<IncrementalDecoder>> decoders;
  for (int64_t w = 0; w < plan.workers; ++w) decoders.push_back(make_decoder_(options.use_cache));

  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  // The OpenMP team size is per thread and setting it clears oneDNN's primitive cache, so it is
  // set only where it changes: for the call on the calling thread (then put back), once per size
  // in a pool thread. Never ATen's global count: the program around us owns it.
  const int team = static_cast<int>(plan.threads_per_worker);
  auto work = [&](IncrementalDecoder& decoder, bool pooled) {
    try {
      thread_local int pool_team = -1;
      if (pooled && pool_team != team) {
        set_thread_team(team);
        pool_team = team;
      }
      // Grad mode and autocast are per thread too. InferenceMode rather than NoGradGuard: the
      // tensors a search makes (KV caches, views of them) then carry no version counters or
      // autograd view records, which cost time at every step; everything they touch lives in
      // this worker's call.
      c10::InferenceMode inference;
      AutocastGuard autocast(device_, dtype_);
      std::optional<RuntimeScope> kernels;
      if (runtime_) kernels.emplace(*runtime_);
      for (size_t b; !failed && (b = next++) < batches;) run_batch(decoder, b);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      failed = true;
    }
  };
  if (plan.workers == 1 && !(runtime_ && runtime_->inter_threads > 0)) {
    ScopedThreadTeam scoped(team);
    work(*decoders.front(), false);
  } else {
    pool_->run(plan.workers, [&](int64_t w) { work(*decoders[static_cast<size_t>(w)], true); });
  }
  if (error) std::rethrow_exception(error);
}

std::vector<PairScore> Translator::score(const std::vector<std::string>& sources,
                                         const std::vector<std::string>& targets, const TranslationOptions& options,
                                         const std::function<void(int64_t)>& done) {
  std::vector<std::vector<int64_t>> ids;
  ids.reserve(targets.size());
  for (const auto& t : targets) ids.push_back(tgt_tok_.encode(t));
  return score_tokens(sources, std::move(ids), options, done);
}

std::vector<PairScore> Translator::score_tokens(const std::vector<std::string>& sources_text,
                                                std::vector<std::vector<int64_t>> targets,
                                                const TranslationOptions& options,
                                                const std::function<void(int64_t)>& done) {
  if (sources_text.size() != targets.size())
    throw std::invalid_argument("score: " + std::to_string(sources_text.size()) + " sources for " +
                                std::to_string(targets.size()) + " targets");
  std::vector<PairScore> out(sources_text.size());
  std::vector<std::vector<int64_t>> sources(sources_text.size());
  std::vector<size_t> order(sources_text.size());
  for (size_t i = 0; i < sources_text.size(); ++i) {
    sources[i] = encode_source(sources_text[i], &out[i].truncated);
    PairScore& p = out[i];
    p.tokens = std::move(targets[i]);
    for (int64_t id : p.tokens)
      if (id < 0 || id >= config_.tgt_vocab_size || id == config_.eos_id || id == config_.bos_id || id == config_.pad_id)
        throw std::invalid_argument("score: target " + std::to_string(i) + " holds token " + std::to_string(id) +
                                    ", not a piece of the model's " + std::to_string(config_.tgt_vocab_size) +
                                    "-piece target vocabulary");
    // The model's output holds at most max_positions - 1 tokens before its eos.
    if (static_cast<int64_t>(p.tokens.size()) >= config_.max_positions) {
      p.tokens.resize(static_cast<size_t>(config_.max_positions - 1));
      p.truncated = true;
    }
    order[i] = i;
  }
  const auto batches = make_batches(sources, order, options);
  const SearchOptions search = search_options(options);
  run_batches(options, batches.size(), [&](IncrementalDecoder& decoder, size_t b) {
    if (search.stop()) throw SearchStopped();
    const auto [begin, end] = batches[b];
    std::vector<const std::vector<int64_t>*> rows, targets;
    // A target scored under the vocabulary translate() gives its source (the language's columns),
    // with its own pieces: the score of translate()'s hypothesis is the score it printed.
    std::vector<std::vector<int64_t>> vocabularies;
    for (size_t r = begin; r < end; ++r) {
      rows.push_back(&sources[order[r]]);
      targets.push_back(&out[order[r]].tokens);
      const auto* language = output_languages_ ? output_languages_->columns_for(sources[order[r]]) : nullptr;
      vocabularies.push_back(language ? within_language({}, *language, out[order[r]].tokens) : std::vector<int64_t>());
    }
    auto scored = force_decode(decoder, source_batch(rows), targets, search.bos_id, search.eos_id, vocabularies);
    for (size_t r = begin; r < end; ++r) {
      PairScore& p = out[order[r]];
      p.log_probs = std::move(scored[r - begin]);
      p.log_prob = sum_log_probs(p.log_probs);
      p.score = p.log_prob / length_penalty(static_cast<int64_t>(p.log_probs.size()), search.length_penalty);
    }
    if (done) done(static_cast<int64_t>(end - begin));
  });
  return out;
}

bool Translator::is_blank(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }

SearchOptions Translator::search_options(const TranslationOptions& options) const {
  SearchOptions search = options.search;
  search.bos_id = config_.bos_id;
  search.eos_id = config_.eos_id;
  search.pad_id = config_.pad_id;
  search.unk_id = config_.unk_id;
  search.max_len_cap = std::min(search.max_len_cap, config_.max_positions);
  return search;
}

at::Tensor Translator::source_batch(const std::vector<const std::vector<int64_t>*>& rows) const {
  size_t longest = 0;
  for (const auto* ids : rows) longest = std::max(longest, ids->size());
  auto src = torch::full({static_cast<int64_t>(rows.size()), static_cast<int64_t>(longest)}, config_.pad_id,
                         torch::kLong);  // [B, S]
  auto acc = src.accessor<int64_t, 2>();
  for (size_t r = 0; r < rows.size(); ++r)
    for (size_t j = 0; j < rows[r]->size(); ++j)
      acc[static_cast<int64_t>(r)][static_cast<int64_t>(j)] = (*rows[r])[j];
  return src.to(device_);
}

void Translator::finish(Translation& t) const {
  t.texts.clear();
  for (const auto& h : t.hypotheses) t.texts.push_back(tgt_tok_.decode(h.tokens));
  if (t.texts.empty()) t.texts.emplace_back();
}

SentenceSteering Translator::steer(const std::vector<int64_t>& source_ids, const LineSteering& line,
                                   int64_t stream) const {
  SentenceSteering s;
  if (!line.target_prefix.empty()) {
    s.prefix = tgt_tok_.encode(line.target_prefix);
    // The model's output never holds more than max_positions - 1 tokens.
    if (static_cast<int64_t>(s.prefix.size()) >= config_.max_positions) {
      s.prefix.resize(static_cast<size_t>(config_.max_positions - 1));
      s.prefix_cut = true;
    }
  }
  int64_t owed = static_cast<int64_t>(s.prefix.size());
  for (const auto& phrase : line.constraints) {
    auto ids = tgt_tok_.encode(phrase);
    if (ids.empty()) continue;  // nothing to hold (blank)
    owed += static_cast<int64_t>(ids.size());
    s.constraints.push_back(std::move(ids));
  }
  if (!s.constraints.empty() && owed >= config_.max_positions)
    throw std::invalid_argument("a line's target prefix and constraints are " + std::to_string(owed) +
                                " target tokens; the model's output holds at most " +
                                std::to_string(config_.max_positions - 1));
  if (restricts_output()) {
    std::vector<int64_t> extra = s.prefix;  // what the output is made to hold stays in its vocabulary
    for (const auto& ids : s.constraints) extra.insert(extra.end(), ids.begin(), ids.end());
    if (shortlist_) s.vocabulary = shortlist_->candidates(source_ids, extra);
    if (const auto* language = output_languages_ ? output_languages_->columns_for(source_ids) : nullptr)
      s.vocabulary = within_language(s.vocabulary, *language, std::move(extra));
  }
  s.stream = stream;
  return s;
}

void Translator::set_languages(ModelLanguages languages) {
  auto output = OutputLanguages::of(languages, config_.tgt_vocab_size);
  languages_ = std::make_shared<const ModelLanguages>(std::move(languages));
  output_languages_ = output ? std::move(output) : open_columns_only();
}

std::shared_ptr<const OutputLanguages> Translator::open_columns_only() {
  if (model_) {  // as the model has them now
    const at::Tensor open = model_->open_output_columns();  // [V] bool
    open_columns_ = open.all().item<bool>() ? std::vector<int64_t>() : column_ids(open);
  }
  return open_columns_.empty() ? nullptr : OutputLanguages::only(open_columns_);
}

void Translator::set_shortlist(std::shared_ptr<const Shortlist> shortlist) {
  if (shortlist && (shortlist->target_vocab() != config_.tgt_vocab_size))
    throw std::invalid_argument("the shortlist's target vocabulary (" + std::to_string(shortlist->target_vocab()) +
                                " pieces) is not the model's (" + std::to_string(config_.tgt_vocab_size) + ")");
  shortlist_ = std::move(shortlist);
}

std::vector<std::string> Translator::translate_text(const std::vector<std::string>& lines,
                                                    const TranslationOptions& options) {
  auto translations = translate(lines, options);
  std::vector<std::string> out;
  out.reserve(translations.size());
  for (auto& t : translations) out.push_back(std::move(t.texts.front()));
  return out;
}

std::vector<at::Tensor> Translator::cross_attention_weights(const std::vector<const std::vector<int64_t>*>& sources,
                                                            const std::vector<const std::vector<int64_t>*>& targets) {
  if (!model_) throw std::runtime_error("cross-attention weights need one checkpoint (not an export or an ensemble)");
  std::optional<RuntimeScope> kernels;
  if (runtime_) kernels.emplace(*runtime_);
  if (sources.size() != targets.size() || sources.empty())
    throw std::invalid_argument("cross-attention: " + std::to_string(sources.size()) + " sources for " +
                                std::to_string(targets.size()) + " targets");
  c10::InferenceMode inference;
  if (model_->is_training()) model_->eval();
  auto src = source_batch(sources);  // [B, S]
  size_t longest = 0;
  for (const auto* ids : targets) longest = std::max(longest, ids->size());
  auto tgt = torch::full({static_cast<int64_t>(targets.size()), static_cast<int64_t>(longest) + 1}, config_.pad_id,
                         torch::kLong);  // [B, T + 1]: bos, then the targets
  auto acc = tgt.accessor<int64_t, 2>();
  for (size_t r = 0; r < targets.size(); ++r) {
    acc[static_cast<int64_t>(r)][0] = config_.bos_id;
    for (size_t j = 0; j < targets[r]->size(); ++j)
      acc[static_cast<int64_t>(r)][static_cast<int64_t>(j) + 1] = (*targets[r])[j];
  }
  tgt = tgt.to(device_);
  auto src_mask = make_padding_mask(src, config_.pad_id);
  auto memory = model_->encode(src, src_mask);
  std::vector<at::Tensor> weights;
  model_->decode(tgt, memory, src_mask, make_target_mask(tgt, config_.pad_id), &weights);
  for (auto& w : weights) w = w.to(torch::kFloat).cpu();  // [B, H, T + 1, S]
  return weights;
}

at::Tensor Translator::cross_attention(const std::string& source, const std::vector<int64_t>& target_ids,
                                       int64_t layer, int64_t head) {
  const auto src_ids = encode_source(source);
  const auto weights = cross_attention_weights({&src_ids}, {&target_ids});
  const auto n_layers = static_cast<int64_t>(weights.size());
  const int64_t index = layer < 0 ? n_layers + layer : layer;
  if (index < 0 || index >= n_layers)
    throw std::invalid_argument("attention layer " + std::to_string(layer) + " out of range (model has " +
                                std::to_string(n_layers) + " decoder layers)");
  auto w = weights[static_cast<size_t>(index)][0];  // [H, T, S]
  if (head >= w.size(0))
    throw std::invalid_argument("attention head " + std::to_string(head) + " out of range (" +
                                std::to_string(w.size(0)) + " heads)");
  return head >= 0 ? w[head] : w.mean(0);  // [T, S]
}

std::string Translator::precision_name() const {
  if (!precision_name_.empty()) return precision_name_;
  if (model_ && runs_int8(model_->fc_out)) return "int8";
  return dtype_name(dtype_);
}

}  // namespace torchmt
