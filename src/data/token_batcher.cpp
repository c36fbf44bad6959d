#include "torchmt/data/token_batcher.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <stdexcept>

#include "torchmt/data/special_ids.h"

namespace torchmt {

namespace {

// splitmix64: the shuffle must be the same on every platform and standard library, and
// std::shuffle / std::uniform_int_distribution are not specified bit for bit.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
};

}  // namespace

TokenBatcher::TokenBatcher(const EncodedCorpus& corpus, BatcherOptions options)
    : corpus_(&corpus), options_(options) {
  if (options_.batch_tokens <= 0) throw std::invalid_argument("batch_tokens must be positive");
  const auto& pairs = corpus.pairs;
  // Row lengths in the tensors: src carries eos, tgt_in/tgt_out carry bos/eos.
  auto src_len = [&](int32_t i) { return static_cast<int64_t>(pairs[static_cast<size_t>(i)].src.size()) + 1; };
  auto tgt_len = [&](int32_t i) { return static_cast<int64_t>(pairs[static_cast<size_t>(i)].tgt.size()) + 1; };

  // Length order (src, then tgt, then position as the tie-break, so the order is total):
  // neighbours have near-equal lengths on both sides, which keeps padding low.
  std::vector<int32_t> order(pairs.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    int64_t sa = src_len(a), sb = src_len(b);
    if (sa != sb) return sa < sb;
    int64_t ta = tgt_len(a), tb = tgt_len(b);
    if (ta != tb) return ta < tb;
    return a < b;
  });

  // Greedy cut: a batch grows while rows * (max_src + max_tgt) stays within the budget.
  std::vector<int32_t> current;
  int64_t max_s = 0, max_t = 0, real = 0;
  auto close = [&]() {
    if (current.empty()) return;
    padded_positions_ += static_cast<int64_t>(current.size()) * (max_s + max_t);
    real_tokens_ += real;
    batches_.push_back(std::move(current));
    current.clear();
    max_s = max_t = real = 0;
  };
  for (int32_t i : order) {
    const int64_t s = src_len(i), t = tgt_len(i);
    const int64_t rows = static_cast<int64_t>(current.size()) + 1;
    if (!current.empty() && rows * (std::max(max_s, s) + std::max(max_t, t)) > options_.batch_tokens) close();
    if (s + t > options_.batch_tokens) {
      // Over the budget on its own: a batch of one rather than a silently dropped pair.
      ++oversized_pairs_;
      close();
    }
    current.push_back(i);
    max_s = std::max(max_s, s);
    max_t = std::max(max_t, t);
    real += s + t;
    if (s + t > options_.batch_tokens) close();
  }
  close();
  order_ = epoch_order(epoch_);
}

std::vector<int64_t> TokenBatcher::epoch_order(int64_t epoch) const {
  std::vector<int64_t> order(batches_.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!options_.shuffle) return order;
  // The state depends on (seed, epoch) only: seek() can rebuild any epoch's order.
  SplitMix64 rng{options_.seed * 0xD1B54A32D192ED03ULL + static_cast<uint64_t>(epoch)};
  for (size_t i = order.size(); i > 1; --i) {
    size_t j = static_cast<size_t>(rng.next() % i);  // modulo bias ~ i / 2^64: irrelevant
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

void TokenBatcher::seek(int64_t epoch, int64_t batch_index) {
  if (epoch < 1) throw std::invalid_argument("epoch is 1-based, got " + std::to_string(epoch));
  if (batch_index < 0 || batch_index > batches_per_epoch()) {
    throw std::invalid_argument("batch index " + std::to_string(batch_index) + " outside an epoch of " +
                                std::to_string(batches_per_epoch()) + " batches");
  }
  if (batch_index == batches_per_epoch() && batch_index > 0) {
    ++epoch;
    batch_index = 0;
  }
  if (epoch != epoch_) order_ = epoch_order(epoch);
  epoch_ = epoch;
  batch_index_ = batch_index;
}

void TokenBatcher::skip() {
  if (batches_.empty()) throw std::runtime_error("no batches: the corpus has no pairs");
  if (++batch_index_ == batches_per_epoch()) {
    ++epoch_;
    batch_index_ = 0;
    order_ = epoch_order(epoch_);
  }
}

Batch TokenBatcher::next(const c10::Device& device) {
  if (batches_.empty()) throw std::runtime_error("no batches: the corpus has no pairs");
  const auto& members = batches_[static_cast<size_t>(order_[static_cast<size_t>(batch_index_)])];
  skip();

  const auto& pairs = corpus_->pairs;
  const int64_t rows = static_cast<int64_t>(members.size());
  int64_t S = 0, T = 0;
  for (int32_t i : members) {
    S = std::max<int64_t>(S, static_cast<int64_t>(pairs[static_cast<size_t>(i)].src.size()) + 1);
    T = std::max<int64_t>(T, static_cast<int64_t>(pairs[static_cast<size_t>(i)].tgt.size()) + 1);
  }
  // Host tensors in page-locked memory when the batch goes to a GPU, so the copy below can
  // run asynchronously; plain memory otherwise (pinning needs a CUDA runtime).
  const bool pin = device.is_cuda();
  auto options = torch::TensorOptions().dtype(torch::kLong).pinned_memory(pin);
  Batch batch;
  batch.src = torch::full({rows, S}, kPadId, options);      // [B, S]
  batch.tgt_in = torch::full({rows, T}, kPadId, options);   // [B, T]
  batch.tgt_out = torch::full({rows, T}, kPadId, options);  // [B, T]
  int64_t* src = batch.src.data_ptr<int64_t>();
  int64_t* tgt_in = batch.tgt_in.data_ptr<int64_t>();
  int64_t* tgt_out = batch.tgt_out.data_ptr<int64_t>();
  batch.indices.reserve(members.size());
  for (int64_t r = 0; r < rows; ++r) {
    const auto& p = pairs[static_cast<size_t>(members[static_cast<size_t>(r)])];
    batch.indices.push_back(p.index);
    int64_t* s = src + r * S;
    std::copy(p.src.begin(), p.src.end(), s);
    s[p.src.size()] = kEosId;
    int64_t* ti = tgt_in + r * T;
    int64_t* to = tgt_out + r * T;
    ti[0] = kBosId;
    std::copy(p.tgt.begin(), p.tgt.end(), ti + 1);
    std::copy(p.tgt.begin(), p.tgt.end(), to);
    to[p.tgt.size()] = kEosId;
    batch.src_tokens += static_cast<int64_t>(p.src.size()) + 1;
    batch.tgt_tokens += static_cast<int64_t>(p.tgt.size()) + 1;
  }
  if (device.type() != c10::DeviceType::CPU) {
    batch.src = batch.src.to(device, /*non_blocking=*/pin);
    batch.tgt_in = batch.tgt_in.to(device, /*non_blocking=*/pin);
    batch.tgt_out = batch.tgt_out.to(device, /*non_blocking=*/pin);
  }
  return batch;
}

double TokenBatcher::padding_fraction() const {
  if (padded_positions_ == 0) return 0.0;
  return 1.0 - static_cast<double>(real_tokens_) / static_cast<double>(padded_positions_);
}

}  // namespace torchmt
