#include "data/token_batcher.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <future>
#include <optional>
#include <thread>
#include <stdexcept>

#include "torchmt/data/special_ids.h"
#include "util/split_mix.h"

namespace torchmt {

namespace {

// A keyed bijection of [0, n) without a table (a 4-round Feistel network on the next even
// number of bits, cycle-walking back into range), so a 30 M-pair epoch needs no 240 MB permutation.
class KeyedPermutation {
 public:
  KeyedPermutation(int64_t n, uint64_t key) : n_(static_cast<uint64_t>(n)), key_(key) {
    int bits = 2;
    while ((uint64_t{1} << bits) < n_) bits += 2;
    half_ = bits / 2;
    mask_ = (uint64_t{1} << half_) - 1;
  }
  int64_t operator()(int64_t i) const {
    uint64_t x = static_cast<uint64_t>(i);
    do x = encrypt(x);
    while (x >= n_);
    return static_cast<int64_t>(x);
  }

 private:
  uint64_t encrypt(uint64_t x) const {
    uint64_t left = x >> half_, right = x & mask_;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t f = mix64(key_ ^ (round << 56) ^ right) & mask_;
      const uint64_t next = left ^ f;
      left = right;
      right = next;
    }
    return (left << half_) | right;
  }
  uint64_t n_, key_, mask_ = 0;
  int half_ = 1;
};

// Draws per epoch from each corpus: its size, or its weight's share of all pairs (largest
// remainder, so the shares add up exactly).
std::vector<int64_t> draws_per_epoch(const std::vector<CorpusShare>& corpora) {
  int64_t total = 0;
  double weights = 0, largest = 0;
  bool weighted = false;
  for (const auto& c : corpora) {
    if (c.source == nullptr) throw std::invalid_argument("corpus '" + c.name + "' has no source");
    if (!(c.weight >= 0) || !std::isfinite(c.weight))
      throw std::invalid_argument("corpus '" + c.name + "': weight must be a finite number >= 0");
    total += c.source->size();
    largest = std::max(largest, c.weight);
    weighted = weighted || c.weight > 0;
  }
  // Shares of the largest weight: a sum of weights near 1e308 would overflow, and a draw count
  // from an infinite share looped (nearly) forever.
  for (const auto& c : corpora) weights += weighted ? c.weight / largest : 0.0;
  std::vector<int64_t> draws;
  if (!weighted) {
    for (const auto& c : corpora) draws.push_back(c.source->size());
    return draws;
  }
  std::vector<std::pair<double, size_t>> remainders;
  int64_t assigned = 0;
  for (size_t k = 0; k < corpora.size(); ++k) {
    if (corpora[k].weight <= 0)
      throw std::invalid_argument("corpus '" + corpora[k].name + "': give every corpus a weight > 0, or none");
    if (corpora[k].source->size() == 0)
      throw std::invalid_argument("corpus '" + corpora[k].name + "' has a weight but no pairs");
    const double exact = static_cast<double>(total) * (corpora[k].weight / largest / weights);
    draws.push_back(static_cast<int64_t>(std::floor(exact)));
    assigned += draws.back();
    remainders.emplace_back(exact - std::floor(exact), k);
  }
  std::sort(remainders.begin(), remainders.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  for (size_t i = 0; assigned < total; ++i, ++assigned) ++draws[remainders[i % remainders.size()].second];
  return draws;
}

}  // namespace

TokenBatcher::TokenBatcher(const PairSource& corpus, BatcherOptions options)
    : TokenBatcher(std::vector<CorpusShare>{{&corpus, 0, "train"}}, options) {}

TokenBatcher::TokenBatcher(std::vector<CorpusShare> corpora, BatcherOptions options)
    : corpora_(std::move(corpora)), options_(options) {
  if (options_.batch_tokens <= 0) throw std::invalid_argument("batch_tokens must be positive");
  if (options_.window_pairs < 0) throw std::invalid_argument("window_pairs must be >= 0");
  if (corpora_.empty()) throw std::invalid_argument("no corpora to batch");
  draws_ = draws_per_epoch(corpora_);
  int64_t base = 0;
  for (const auto& c : corpora_) {
    bases_.push_back(base);
    base += c.source->size();
  }
  const int64_t per_epoch = std::accumulate(draws_.begin(), draws_.end(), int64_t{0});
  if (options_.window_pairs > 0 && per_epoch > options_.window_pairs)
    windows_per_epoch_ = (per_epoch + options_.window_pairs - 1) / options_.window_pairs;
  count_epoch(1);
  seek(1, 0);
}

int64_t TokenBatcher::corpus_of(int64_t id) const {
  return static_cast<int64_t>(std::upper_bound(bases_.begin(), bases_.end(), id) - bases_.begin()) - 1;
}

int64_t TokenBatcher::src_length(int64_t id) const {
  const auto k = static_cast<size_t>(corpus_of(id));
  return corpora_[k].source->src_length(id - bases_[k]) + 1;  // + eos
}

int64_t TokenBatcher::tgt_length(int64_t id) const {
  const auto k = static_cast<size_t>(corpus_of(id));
  return corpora_[k].source->tgt_length(id - bases_[k]) + 1;  // + bos / eos
}

TokenBatcher::Window TokenBatcher::build_window(int64_t epoch, int64_t w) const {
  Window win;
  win.epoch = epoch;
  win.index = w;
  // Corpus k's draws form an endless stream: draw j is pair perm_{j / N}(j % N), a fresh
  // permutation per pass; epoch e takes draws [(e - 1) q, e q), window w its w-th slice.
  for (size_t k = 0; k < corpora_.size(); ++k) {
    const int64_t n = corpora_[k].source->size(), q = draws_[k];
    if (n == 0) continue;
    const int64_t begin = (epoch - 1) * q + w * q / windows_per_epoch_;
    const int64_t end = (epoch - 1) * q + (w + 1) * q / windows_per_epoch_;
    int64_t pass = -1;
    std::optional<KeyedPermutation> perm;
    for (int64_t j = begin; j < end; ++j) {
      const int64_t position = j % n;
      if (!options_.shuffle) {
        win.members.push_back(bases_[k] + position);
        continue;
      }
      if (j / n != pass) {
        pass = j / n;
        perm.emplace(n, mix64(options_.seed ^ mix64((static_cast<uint64_t>(k) << 32) ^ static_cast<uint64_t>(pass))));
      }
      win.members.push_back(bases_[k] + (*perm)(position));
    }
  }
  resegment(win);
  // Length order (src, then tgt, then id as the tie-break, so the order is total):
  // neighbours have near-equal lengths on both sides, which keeps padding low.
  struct Keyed {
    uint64_t lengths;
    int64_t id;
    size_t slot;  // the member's position before sorting
  };
  const bool sampled = !win.spans.empty();
  std::vector<Keyed> keyed(win.members.size());
  for (size_t i = 0; i < keyed.size(); ++i) {
    const int64_t id = win.members[i];
    const int64_t s = sampled ? win.spans[i].src_len + 1 : src_length(id);
    const int64_t t = sampled ? win.spans[i].tgt_len + 1 : tgt_length(id);
    keyed[i] = {static_cast<uint64_t>(s) << 32 | static_cast<uint64_t>(t), id, i};
  }
  std::sort(keyed.begin(), keyed.end(),
            [](const Keyed& a, const Keyed& b) { return a.lengths != b.lengths ? a.lengths < b.lengths : a.id < b.id; });
  if (sampled) {
    std::vector<Window::Span> spans(keyed.size());
    for (size_t i = 0; i < keyed.size(); ++i) spans[i] = win.spans[keyed[i].slot];
    win.spans = std::move(spans);
  }

  // Greedy cut: a batch grows while rows * (max_src + max_tgt) stays within the budget.
  int64_t rows = 0, max_s = 0, max_t = 0, real = 0;
  auto close = [&](size_t end) {
    if (rows == 0) return;
    win.padded_positions += rows * (max_s + max_t);
    win.real_tokens += real;
    win.starts.push_back(static_cast<int64_t>(end));
    rows = max_s = max_t = real = 0;
  };
  win.starts.push_back(0);
  for (size_t i = 0; i < keyed.size(); ++i) {
    const int64_t s = static_cast<int64_t>(keyed[i].lengths >> 32), t = static_cast<int64_t>(keyed[i].lengths & 0xFFFFFFFF);
    win.members[i] = keyed[i].id;
    if (rows > 0 && (rows + 1) * (std::max(max_s, s) + std::max(max_t, t)) > options_.batch_tokens) close(i);
    if (s + t > options_.batch_tokens) {
      // Over the budget on its own: a batch of one rather than a silently dropped pair.
      ++win.oversized_pairs;
      close(i);
    }
    ++rows;
    max_s = std::max(max_s, s);
    max_t = std::max(max_t, t);
    real += s + t;
    if (s + t > options_.batch_tokens) close(i + 1);
  }
  close(keyed.size());
  const auto batches = static_cast<int64_t>(win.starts.size()) - 1;
  win.order.resize(static_cast<size_t>(batches));
  std::iota(win.order.begin(), win.order.end(), int64_t{0});
  if (options_.shuffle) {
    // The state depends on (seed, epoch, window) only: seek() can rebuild any window's order.
    SplitMix64 rng{options_.seed * 0xD1B54A32D192ED03ULL + static_cast<uint64_t>(epoch) +
                   static_cast<uint64_t>(w) * 0x9E3779B97F4A7C15ULL};
    for (size_t i = win.order.size(); i > 1; --i) {
      const size_t j = static_cast<size_t>(rng.next() % i);  // modulo bias ~ i / 2^64: irrelevant
      std::swap(win.order[i - 1], win.order[j]);
    }
  }
  for (const auto& c : corpora_) c.source->release_pages();
  return win;
}

void TokenBatcher::resegment(Window& win) const {
  if (!options_.src_dropout && !options_.tgt_dropout) return;
  std::vector<int64_t> ids, sampled;
  auto side = [&](const BpeDropout* dropout, uint64_t key, int64_t& at, int64_t& length) {
    sampled.clear();
    if (dropout != nullptr) dropout->sample(ids.data(), static_cast<int64_t>(ids.size()), key, sampled);
    const std::vector<int64_t>& chosen = dropout != nullptr ? sampled : ids;
    at = static_cast<int64_t>(win.tokens.size());
    length = static_cast<int64_t>(chosen.size());
    win.tokens.insert(win.tokens.end(), chosen.begin(), chosen.end());
  };
  win.spans.resize(win.members.size());
  for (size_t i = 0; i < win.members.size(); ++i) {
    const int64_t id = win.members[i];
    const auto k = static_cast<size_t>(corpus_of(id));
    const PairSource& source = *corpora_[k].source;
    const int64_t local = id - bases_[k];
    const uint64_t key = mix64(options_.seed ^ mix64(static_cast<uint64_t>(win.epoch) << 40 ^ static_cast<uint64_t>(id)));
    Window::Span& span = win.spans[i];
    ids.resize(static_cast<size_t>(source.src_length(local)));
    source.copy_src(local, ids.data());
    side(options_.src_dropout.get(), key, span.src_at, span.src_len);
    ids.resize(static_cast<size_t>(source.tgt_length(local)));
    source.copy_tgt(local, ids.data());
    side(options_.tgt_dropout.get(), mix64(key), span.tgt_at, span.tgt_len);
  }
}

void TokenBatcher::count_epoch(int64_t epoch) {
  if (counted_epoch_ == epoch) return;
  // Windows are independent: built on all the threads asked (every core by default), which is
  // most of a big corpus's start-up.
  std::vector<Window> windows(static_cast<size_t>(windows_per_epoch_));
  const int64_t cores = options_.threads > 0 ? options_.threads : std::max(1u, std::thread::hardware_concurrency());
  const int64_t threads = std::min<int64_t>(windows_per_epoch_, cores);
  std::vector<std::future<void>> workers;
  for (int64_t t = 0; t < threads; ++t)
    workers.push_back(std::async(std::launch::async, [&, t] {
      for (int64_t w = t; w < windows_per_epoch_; w += threads) {
        Window win = build_window(epoch, w);
        if (windows_per_epoch_ > 1) {  // keep the batch boundaries and figures only
          win.members = {};
          win.order = {};
          win.tokens = {};
          win.spans = {};
        }
        windows[static_cast<size_t>(w)] = std::move(win);
      }
    }));
  for (auto& worker : workers) worker.get();
  window_batches_.clear();
  epoch_batches_ = 0;
  for (const Window& win : windows) {
    window_batches_.push_back(static_cast<int64_t>(win.starts.size()) - 1);
    epoch_batches_ += window_batches_.back();
    if (epoch == 1 && !epoch1_figures_) {
      padded_positions_ += win.padded_positions;
      real_tokens_ += win.real_tokens;
      oversized_pairs_ += win.oversized_pairs;
    }
  }
  epoch1_figures_ = epoch1_figures_ || epoch == 1;
  if (windows_per_epoch_ == 1) current_ = std::move(windows[0]);  // the one window: keep it
  counted_epoch_ = epoch;
}

void TokenBatcher::load_window(int64_t w) {
  if (current_.epoch == epoch_ && current_.index == w) return;
  current_ = build_window(epoch_, w);
}

void TokenBatcher::seek(int64_t epoch, int64_t batch_index) {
  if (epoch < 1) throw std::invalid_argument("epoch is 1-based, got " + std::to_string(epoch));
  count_epoch(epoch);
  if (batch_index < 0 || batch_index > epoch_batches_) {
    throw std::invalid_argument("batch index " + std::to_string(batch_index) + " outside an epoch of " +
                                std::to_string(epoch_batches_) + " batches");
  }
  if (batch_index == epoch_batches_ && batch_index > 0) {
    ++epoch;
    batch_index = 0;
    count_epoch(epoch);
  }
  epoch_ = epoch;
  batch_index_ = batch_index;
  window_ = 0;
  in_window_ = batch_index;
  while (window_ + 1 < windows_per_epoch_ && in_window_ >= window_batches_[static_cast<size_t>(window_)])
    in_window_ -= window_batches_[static_cast<size_t>(window_++)];
}

void TokenBatcher::skip() {
  if (epoch_batches_ == 0) throw std::runtime_error("no batches: the corpus has no pairs");
  ++batch_index_;
  ++in_window_;
  if (batch_index_ == epoch_batches_) {
    seek(epoch_ + 1, 0);
    return;
  }
  while (in_window_ >= window_batches_[static_cast<size_t>(window_)]) {
    in_window_ -= window_batches_[static_cast<size_t>(window_)];
    ++window_;
  }
}

Batch TokenBatcher::next(const c10::Device& device) {
  if (epoch_batches_ == 0) throw std::runtime_error("no batches: the corpus has no pairs");
  load_window(window_);
  const int64_t b = current_.order[static_cast<size_t>(in_window_)];
  const int64_t first = current_.starts[static_cast<size_t>(b)], last = current_.starts[static_cast<size_t>(b) + 1];

  const int64_t rows = last - first;
  const bool sampled = !current_.spans.empty();
  int64_t S = 0, T = 0;
  for (int64_t r = first; r < last; ++r) {
    const auto m = static_cast<size_t>(r);
    S = std::max(S, sampled ? current_.spans[m].src_len + 1 : src_length(current_.members[m]));
    T = std::max(T, sampled ? current_.spans[m].tgt_len + 1 : tgt_length(current_.members[m]));
  }
  // Host tensors in page-locked memory when the batch goes to a GPU, so the copy below can
  // run asynchronously; plain memory otherwise (pinning needs a CUDA runtime).
  const bool pin = device.is_cuda();
  auto options = torch::TensorOptions().dtype(torch::kLong).pinned_memory(pin);
  Batch batch;
  const SpecialIds& special = options_.special;
  batch.src = torch::full({rows, S}, special.pad, options);      // [B, S]
  batch.tgt_in = torch::full({rows, T}, special.pad, options);   // [B, T]
  batch.tgt_out = torch::full({rows, T}, special.pad, options);  // [B, T]
  int64_t* src = batch.src.data_ptr<int64_t>();
  int64_t* tgt_in = batch.tgt_in.data_ptr<int64_t>();
  int64_t* tgt_out = batch.tgt_out.data_ptr<int64_t>();
  batch.indices.reserve(static_cast<size_t>(rows));
  batch.corpus_rows.assign(corpora_.size(), 0);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t id = current_.members[static_cast<size_t>(first + r)];
    const auto k = static_cast<size_t>(corpus_of(id));
    const PairSource& source = *corpora_[k].source;
    const int64_t i = id - bases_[k];
    const Window::Span* span = sampled ? &current_.spans[static_cast<size_t>(first + r)] : nullptr;
    const int64_t s_len = span ? span->src_len : source.src_length(i), t_len = span ? span->tgt_len : source.tgt_length(i);
    batch.indices.push_back(source.line(i));
    ++batch.corpus_rows[k];
    int64_t* s = src + r * S;
    int64_t* ti = tgt_in + r * T;
    int64_t* to = tgt_out + r * T;
    if (span) {
      const int32_t* tokens = current_.tokens.data();
      std::copy(tokens + span->src_at, tokens + span->src_at + s_len, s);
      std::copy(tokens + span->tgt_at, tokens + span->tgt_at + t_len, to);
    } else {
      source.copy_src(i, s);
      source.copy_tgt(i, to);
    }
    s[s_len] = special.eos;
    ti[0] = special.bos;
    std::copy(to, to + t_len, ti + 1);
    to[t_len] = special.eos;
    batch.src_tokens += s_len + 1;
    batch.tgt_tokens += t_len + 1;
  }
  // Only now: at an epoch's end skip() builds the next epoch's window in place of current_.
  skip();
  if (device.type() != c10::DeviceType::CPU) {
    batch.src = batch.src.to(device, /*non_blocking=*/pin);
    batch.tgt_in = batch.tgt_in.to(device, /*non_blocking=*/pin);
    batch.tgt_out = batch.tgt_out.to(device, /*non_blocking=*/pin);
  }
  return batch;
}

std::vector<int64_t> TokenBatcher::drawn_pairs(int64_t epoch, int64_t batch_index) {
  const int64_t saved_epoch = epoch_, saved_index = batch_index_;
  seek(epoch, batch_index);
  std::vector<int64_t> drawn(corpora_.size());
  for (size_t k = 0; k < corpora_.size(); ++k)
    drawn[k] = (epoch_ - 1) * draws_[k] + window_ * draws_[k] / windows_per_epoch_;
  if (in_window_ > 0) {
    load_window(window_);
    for (int64_t i = 0; i < in_window_; ++i) {
      const auto b = static_cast<size_t>(current_.order[static_cast<size_t>(i)]);
      for (int64_t r = current_.starts[b]; r < current_.starts[b + 1]; ++r)
        ++drawn[static_cast<size_t>(corpus_of(current_.members[static_cast<size_t>(r)]))];
    }
  }
  seek(saved_epoch, saved_index);
  return drawn;
}

double TokenBatcher::padding_fraction() const {
  if (padded_positions_ == 0) return 0.0;
  return 1.0 - static_cast<double>(real_tokens_) / static_cast<double>(padded_positions_);
}

}  // namespace torchmt
