#pragma once
// The rows' output shortlists of an IncrementalDecoder (restrict_output), kept in step with the
// decoder's rows: which tokens each row may produce, as a mask [N, V], and the union of them,
// the only columns of the output projection anyone needs. When every row has the same list (one
// language's pieces for a whole batch) the mask is that one row, [1, V], and no step masks.
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torchmt {

class OutputRestriction {
 public:
  bool active() const { return allowed_.defined(); }
  // Every row may produce exactly columns(): nothing within them is blocked.
  bool shared() const { return shared_; }
  // start(): no rows, nothing restricted.
  void reset();
  // join(): n rows added after the current ones, unrestricted until restrict_last says otherwise.
  // (`rows` below: the decoder's rows after them.)
  void add_rows(int64_t n);
  // The decoder's restrict_output for its last vocabularies.size() rows (vocab: the output size).
  void restrict_last(const std::vector<const std::vector<int64_t>*>& vocabularies, int64_t rows, int64_t vocab,
                     const at::Device& device);
  // New row i is old row index[i] (select, reorders); each row becomes k consecutive rows.
  void select(const at::Tensor& index);
  void expand(int64_t k);
  // [N, V] bool, true = may be produced; [1, V] when shared().
  const at::Tensor& allowed() const { return allowed_; }
  // The sorted token ids some row may produce [U] int64, and which of them each row may not
  // [N, U] bool (made once per restriction and kept in step with the rows: a decoding step only
  // reads it; undefined when shared()). The columns stay those of the last restrict_last (rows
  // leaving do not shrink them).
  const at::Tensor& columns() const { return columns_; }
  const at::Tensor& blocked_columns();
  // log-probabilities [N, V] of the unrestricted model -> those of the restricted one: -inf
  // outside each row's list, the rest renormalised.
  at::Tensor apply(const at::Tensor& log_probs) const;

 private:
  void unshare();  // [1, V] -> one row per decoder row, before rows' lists part

  at::Tensor allowed_;  // [N, V] bool ([1, V] when shared_), undefined = no row restricted
  at::Tensor columns_;  // [U] int64
  at::Tensor blocked_;  // [N, U] bool, undefined until blocked_columns() asks for it
  bool shared_ = false;
  int64_t rows_ = 0;    // the decoder's rows (allowed_'s, unless shared_)
};

}  // namespace torchmt
