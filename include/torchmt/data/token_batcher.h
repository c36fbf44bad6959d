#pragma once
// Token-budget batches in the style of fairseq's --max-tokens: pairs are sorted by length,
// cut into batches whose padded size rows * (max_src + max_tgt) stays within the budget, and
// the batches are shuffled once per epoch. The order is a function of (seed, epoch) only, so
// a run resumed with seek() sees exactly the batches it would have seen.
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "torchmt/data/parallel_corpus.h"

namespace torchmt {

struct Batch {
  at::Tensor src;      // [B, S] int64: x + eos, padded with kPadId
  at::Tensor tgt_in;   // [B, T] int64: bos + y, padded
  at::Tensor tgt_out;  // [B, T] int64: y + eos, padded
  int64_t src_tokens = 0, tgt_tokens = 0;  // non-pad counts (tgt_tokens counts tgt_out)
  std::vector<int64_t> indices;            // EncodedPair::index of each row
};

struct BatcherOptions {
  int64_t batch_tokens = 4096;  // rows * (S + T), padding included
  uint64_t seed = 1;
  bool shuffle = true;  // false: batches in length order every epoch
};

class TokenBatcher {
 public:
  // Keeps a pointer to `corpus`: it must outlive the batcher. A pair that alone exceeds
  // batch_tokens becomes a batch of its own (counted in oversized_pairs()), never dropped.
  TokenBatcher(const EncodedCorpus& corpus, BatcherOptions options);

  int64_t batches_per_epoch() const { return static_cast<int64_t>(batches_.size()); }
  // Positions the iterator at batch `batch_index` (0-based) of `epoch` (1-based);
  // batch_index == batches_per_epoch() means the start of the next epoch.
  void seek(int64_t epoch, int64_t batch_index);
  int64_t epoch() const { return epoch_; }              // of the NEXT batch
  int64_t batch_index() const { return batch_index_; }  // of the NEXT batch
  // The next batch on `device` (pinned memory and non-blocking copies on CUDA); after the
  // last batch of an epoch, rolls over to the next epoch's order.
  Batch next(const c10::Device& device);
  // Moves past the next batch without building it (another data-parallel rank's batch).
  void skip();

  // Pad positions / all positions, over one epoch's batches (the same every epoch).
  double padding_fraction() const;
  int64_t oversized_pairs() const { return oversized_pairs_; }
  // Pair positions (into corpus.pairs) of the i-th batch in length order.
  const std::vector<int32_t>& batch_members(int64_t i) const { return batches_.at(static_cast<size_t>(i)); }
  // Length-order batch ids in the order `epoch` visits them.
  std::vector<int64_t> epoch_order(int64_t epoch) const;

 private:
  const EncodedCorpus* corpus_;
  BatcherOptions options_;
  std::vector<std::vector<int32_t>> batches_;
  int64_t padded_positions_ = 0, real_tokens_ = 0, oversized_pairs_ = 0;
  int64_t epoch_ = 1, batch_index_ = 0;
  std::vector<int64_t> order_;  // epoch_order(epoch_)
};

}  // namespace torchmt
