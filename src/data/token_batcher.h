#pragma once
// Token-budget batches in the style of fairseq's --max-tokens: pairs are sorted by length,
// cut into batches whose padded size rows * (max_src + max_tgt) stays within the budget, and
// the batches are shuffled. On a corpus larger than one window, an epoch is a random
// permutation of the pairs cut into windows, each sorted and batched on its own (Marian's
// --maxi-batch): memory follows the window, not the corpus. Several corpora are mixed in set
// proportions. Everything is a function of (seed, epoch), so a run resumed with seek() sees
// exactly the batches it would have seen.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "data/bpe_dropout.h"
#include "data/parallel_corpus.h"

namespace torchmt {

struct Batch {
  at::Tensor src;      // [B, S] int64: x + eos, padded with pad
  at::Tensor tgt_in;   // [B, T] int64: bos + y, padded
  at::Tensor tgt_out;  // [B, T] int64: y + eos, padded
  int64_t src_tokens = 0, tgt_tokens = 0;  // non-pad counts (tgt_tokens counts tgt_out)
  std::vector<int64_t> indices;            // PairSource::line of each row (in its own corpus)
  std::vector<int64_t> corpus_rows;        // rows from each corpus, in the batcher's corpus order
};

struct BatcherOptions {
  int64_t batch_tokens = 4096;  // rows * (S + T), padding included
  uint64_t seed = 1;
  bool shuffle = true;  // false: pairs in corpus order, batches in length order, every epoch
  // Pairs sorted together; an epoch with more is cut into windows of at most this many.
  // 0: the whole epoch is one window (a global sort).
  int64_t window_pairs = 1 << 20;
  SpecialIds special = {};  // the model's (pad, start, end)
  int64_t threads = 0;      // threads building an epoch's windows; 0: hardware concurrency
  // BPE-dropout of each side: every pair segmented anew each epoch, a function of (seed, epoch,
  // pair); null: the stored ids.
  std::shared_ptr<const BpeDropout> src_dropout = nullptr, tgt_dropout = nullptr;
};

// A corpus in a mix: `weight` is its share of the pairs drawn (weights are relative); when
// every weight is 0, each corpus is drawn once per epoch (plain concatenation).
struct CorpusShare {
  const PairSource* source = nullptr;
  double weight = 0;
  std::string name;
};

class TokenBatcher {
 public:
  // Keeps pointers to the corpora: they must outlive the batcher. A pair that alone exceeds
  // batch_tokens becomes a batch of its own (counted in oversized_pairs()), never dropped.
  TokenBatcher(const PairSource& corpus, BatcherOptions options);
  TokenBatcher(std::vector<CorpusShare> corpora, BatcherOptions options);

  // Batches in the current epoch (epochs with several windows differ by a few batches).
  int64_t batches_per_epoch() const { return epoch_batches_; }
  // Positions the iterator at batch `batch_index` (0-based) of `epoch` (1-based);
  // batch_index == batches in that epoch means the start of the next epoch.
  void seek(int64_t epoch, int64_t batch_index);
  int64_t epoch() const { return epoch_; }              // of the NEXT batch
  int64_t batch_index() const { return batch_index_; }  // of the NEXT batch
  // The next batch on `device` (pinned memory and non-blocking copies on CUDA); after the
  // last batch of an epoch, rolls over to the next epoch's order.
  Batch next(const c10::Device& device);
  // Moves past the next batch without building it (another data-parallel rank's batch).
  void skip();

  // Pad positions / all positions, over epoch 1's batches.
  double padding_fraction() const;
  int64_t oversized_pairs() const { return oversized_pairs_; }  // in epoch 1
  int64_t windows_per_epoch() const { return windows_per_epoch_; }
  // Pairs drawn from each corpus per epoch (its weight's share; its size when unweighted).
  const std::vector<int64_t>& pairs_per_epoch() const { return draws_; }
  // Pairs of each corpus in the batches before position (epoch, batch_index), from the start
  // of training (all ranks' batches: a function of the position, so a resumed run counts the same).
  std::vector<int64_t> drawn_pairs(int64_t epoch, int64_t batch_index);

 private:
  struct Window {
    int64_t epoch = 0, index = -1;
    std::vector<int64_t> members;  // global pair ids, length order
    std::vector<int64_t> starts;   // batch b is members[starts[b], starts[b + 1])
    std::vector<int64_t> order;    // batch ids in the order this epoch visits them
    int64_t padded_positions = 0, real_tokens = 0, oversized_pairs = 0;
    // With BPE-dropout, member i's ids this epoch: tokens[spans[i].src_at, + src_len), and so on.
    struct Span {
      int64_t src_at, src_len, tgt_at, tgt_len;
    };
    std::vector<int32_t> tokens;
    std::vector<Span> spans;
  };
  void resegment(Window& win) const;
  Window build_window(int64_t epoch, int64_t w) const;
  void count_epoch(int64_t epoch);  // epoch_batches_ and window_batches_ for `epoch`
  void load_window(int64_t w);
  int64_t corpus_of(int64_t id) const;
  int64_t src_length(int64_t id) const;
  int64_t tgt_length(int64_t id) const;

  std::vector<CorpusShare> corpora_;
  std::vector<int64_t> bases_;  // global id of each corpus's first pair
  std::vector<int64_t> draws_;  // pairs drawn from each corpus per epoch
  BatcherOptions options_;
  int64_t windows_per_epoch_ = 1;
  int64_t padded_positions_ = 0, real_tokens_ = 0, oversized_pairs_ = 0;  // epoch 1
  bool epoch1_figures_ = false;
  int64_t epoch_ = 1, batch_index_ = 0;
  int64_t counted_epoch_ = 0, epoch_batches_ = 0;
  std::vector<int64_t> window_batches_;  // batches in each window of counted_epoch_
  int64_t window_ = 0, in_window_ = 0;     // position of the NEXT batch
  Window current_;
};

}  // namespace torchmt
