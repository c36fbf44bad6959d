#pragma once
// The model side of decoding, as the search algorithms see it (CTranslate2's decoding.h,
// fairseq's search.py): encode a batch once, then score one next token per live row.
// Rows are hypotheses; `select` keeps, reorders or duplicates them (beam reordering,
// finished sentences leaving the batch), so no compute is spent on finished rows.
#include <cstdint>
#include <stdexcept>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torchmt {

// Column <-> token of a step's log-probabilities (IncrementalDecoder::output_columns), on the host.
class OutputColumns {
 public:
  explicit OutputColumns(const at::Tensor& columns);
  int64_t token(int64_t column) const { return ids_.empty() ? column : ids_[static_cast<size_t>(column)]; }
  int64_t column(int64_t token) const;  // -1 when the token has no column
 private:
  std::vector<int64_t> ids_;  // empty: the identity
};

class IncrementalDecoder {
 public:
  virtual ~IncrementalDecoder() = default;
  // src [B, S] token ids (padded with the model's pad id). Resets the state to B rows.
  virtual void start(const at::Tensor& src) = 0;
  // last_tokens [N] (the newest token of each row) -> log-probabilities [N, C], float32, of
  // the tokens output_columns() names (C = V, column j token j, unless restricted).
  virtual at::Tensor step(const at::Tensor& last_tokens) = 0;
  // The tokens of step()'s columns, [C] int64 sorted, or undefined: every token, in order. A
  // decoder under restrict_output may compute only the tokens some row may produce.
  virtual at::Tensor output_columns() const { return {}; }
  // The same step for greedy search without scores: each row's most probable next token, [N]
  // int64 on the decoder's device, the token step()'s top-1 (row_top_k) would give. The default
  // is exactly that; a decoder may find it with less work.
  virtual at::Tensor greedy_tokens(const at::Tensor& last_tokens);
  // Beam search's step: each row's `width` best entries of step() (values and columns [N, w],
  // w = min(width, C), in row_top_k's order) and the entries of `extra_columns` ([N, E]), all on
  // the host. The default is exactly that; a decoder may find them with less work (the CPU fp32
  // Transformer screens its projection: log-probabilities ~2e-4 from step()'s).
  struct TopK {
    at::Tensor values, indices, extra;
    int64_t columns = 0;  // C, step()'s columns
  };
  virtual TopK step_top_k(const at::Tensor& last_tokens, int64_t width, const std::vector<int64_t>& extra_columns);
  // The TopK of log-probabilities [N, C] as step_top_k's default takes it.
  static TopK top_k_of(const at::Tensor& lprobs, int64_t width, const std::vector<int64_t>& extra_columns);
  // New row i is old row index[i]; index [N'] int64 on the decoder's device.
  virtual void select(const at::Tensor& index) = 0;
  // Each of the `rows` current rows becomes k consecutive rows (the k beams of a sentence
  // start as copies); from then on the search's selects keep every group of k rows within
  // one sentence, so decoders may keep one copy of a sentence's source side per group. The
  // default is select(arange(rows).repeat_interleave(k)).
  virtual void expand_rows(int64_t rows, int64_t k);
  // A select in which new row i takes an old row of the same source sentence as old row i
  // (beam reordering while no sentence leaves the batch). Decoders may keep their
  // source-side state as it is; the default is a full select.
  virtual void reorder_within_sentences(const at::Tensor& index) { select(index); }
  // In-flight batching: whether join() can add rows to a running batch.
  virtual bool can_join() const { return false; }
  // src [n, S] (padded, on the device): n new rows after the current ones, each at its
  // first target position at the next step (the others keep theirs). Without can_join(),
  // only start() begins a batch.
  virtual void join(const at::Tensor& /*src*/) {
    throw std::logic_error("this decoder cannot add rows to a running batch");
  }
  // Output shortlist (SentenceSteering::vocabulary): each of the n rows that start() or join()
  // just added may produce only the tokens of its list (sorted ids; an empty list: any); every
  // other token gets log-probability -inf in step() (the rest renormalised) and is never one of
  // greedy_tokens(). Rows keep their lists through select, expand_rows and reorders. The
  // default refuses (std::invalid_argument): a decoder that cannot restrict its output.
  virtual void restrict_output(const std::vector<const std::vector<int64_t>*>& vocabularies);
  virtual at::Device device() const = 0;
};

}  // namespace torchmt
