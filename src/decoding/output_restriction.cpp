#include "decoding/output_restriction.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include <torch/torch.h>

namespace torchmt {

void OutputRestriction::reset() {
  allowed_ = at::Tensor();
  columns_ = at::Tensor();
  blocked_ = at::Tensor();
  shared_ = false;
  rows_ = 0;
}

void OutputRestriction::unshare() {
  if (!shared_) return;
  allowed_ = allowed_.expand({rows_, allowed_.size(1)}).contiguous();  // [N, V]
  shared_ = false;
}

void OutputRestriction::add_rows(int64_t n) {
  unshare();  // the new rows may produce anything
  rows_ += n;
  if (!active()) return;
  allowed_ = torch::cat({allowed_, torch::ones({n, allowed_.size(1)}, allowed_.options())});  // [N + n, V]
  columns_ = torch::arange(allowed_.size(1), columns_.options());  // an unrestricted row needs every column
  blocked_ = at::Tensor();
}

void OutputRestriction::restrict_last(const std::vector<const std::vector<int64_t>*>& vocabularies, int64_t rows,
                                      int64_t vocab, const at::Device& device) {
  const auto n = static_cast<int64_t>(vocabularies.size());
  if (n > rows) throw std::invalid_argument("output restriction: more lists than rows");
  // Every row of the decoder with one list: that list's mask alone.
  const auto* first = n > 0 ? vocabularies.front() : nullptr;
  const bool one_list = n == rows && first && !first->empty() &&
                        std::all_of(vocabularies.begin(), vocabularies.end(),
                                    [&](const std::vector<int64_t>* v) { return v == first || (v && *v == *first); });
  if (!one_list) unshare();
  rows_ = rows;
  auto rows_mask = torch::zeros({one_list ? 1 : n, vocab}, torch::kBool);  // [n or 1, V], on the host while filled
  auto* m = rows_mask.data_ptr<bool>();
  for (int64_t r = 0; r < rows_mask.size(0); ++r) {
    const auto* list = vocabularies[static_cast<size_t>(r)];
    if (!list || list->empty()) {
      std::fill(m + r * vocab, m + (r + 1) * vocab, true);
      continue;
    }
    for (int64_t token : *list) {
      if (token < 0 || token >= vocab)
        throw std::invalid_argument("output restriction: token " + std::to_string(token) + " outside the vocabulary of " +
                                    std::to_string(vocab));
      m[r * vocab + token] = true;
    }
  }
  blocked_ = at::Tensor();
  if (one_list) {
    allowed_ = rows_mask.to(device);  // [1, V]
    columns_ = allowed_.view({-1}).nonzero().view({-1});  // [U], sorted
    shared_ = true;
    return;
  }
  if (!active()) allowed_ = torch::ones({rows, vocab}, torch::TensorOptions().dtype(torch::kBool).device(device));
  allowed_.narrow(0, rows - n, n).copy_(rows_mask);
  columns_ = allowed_.any(0).nonzero().view({-1});  // [U], sorted
  // Rows that joined a running batch with the list all the others have: one list again.
  const at::Tensor first_row = allowed_.narrow(0, 0, 1);  // [1, V]
  if (allowed_.eq(first_row).all().item<bool>() && !first_row.all().item<bool>()) {
    allowed_ = first_row.clone();
    shared_ = true;
  }
}

void OutputRestriction::select(const at::Tensor& index) {
  rows_ = index.size(0);
  if (!active() || shared_) return;
  allowed_ = allowed_.index_select(0, index);
  if (blocked_.defined()) blocked_ = blocked_.index_select(0, index);
}

void OutputRestriction::expand(int64_t k) {
  rows_ *= k;
  if (!active() || shared_) return;
  allowed_ = allowed_.repeat_interleave(k, 0);                           // [N * k, V]
  if (blocked_.defined()) blocked_ = blocked_.repeat_interleave(k, 0);  // [N * k, U]
}

const at::Tensor& OutputRestriction::blocked_columns() {
  if (!blocked_.defined() && !shared_) blocked_ = allowed_.index_select(1, columns_).logical_not();  // [N, U]
  return blocked_;
}

at::Tensor OutputRestriction::apply(const at::Tensor& log_probs) const {
  if (!active()) return log_probs;
  // allowed_ [N, V], or [1, V] for every row.
  return torch::log_softmax(log_probs.masked_fill(allowed_.logical_not(), -std::numeric_limits<float>::infinity()), -1);
}

}  // namespace torchmt
