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
}

void OutputRestriction::add_rows(int64_t n) {
  if (!active()) return;
  allowed_ = torch::cat({allowed_, torch::ones({n, allowed_.size(1)}, allowed_.options())});  // [N + n, V]
  columns_ = torch::arange(allowed_.size(1), columns_.options());  // an unrestricted row needs every column
  blocked_ = at::Tensor();
}

void OutputRestriction::restrict_last(const std::vector<const std::vector<int64_t>*>& vocabularies, int64_t rows,
                                      int64_t vocab, const at::Device& device) {
  const auto n = static_cast<int64_t>(vocabularies.size());
  if (n > rows) throw std::invalid_argument("output restriction: more lists than rows");
  auto rows_mask = torch::zeros({n, vocab}, torch::kBool);  // [n, V], on the host while filled
  auto* m = rows_mask.data_ptr<bool>();
  for (int64_t r = 0; r < n; ++r) {
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
  if (!active()) allowed_ = torch::ones({rows, vocab}, torch::TensorOptions().dtype(torch::kBool).device(device));
  allowed_.narrow(0, rows - n, n).copy_(rows_mask);
  columns_ = allowed_.any(0).nonzero().view({-1});  // [U], sorted
  blocked_ = at::Tensor();
}

void OutputRestriction::select(const at::Tensor& index) {
  if (!active()) return;
  allowed_ = allowed_.index_select(0, index);
  if (blocked_.defined()) blocked_ = blocked_.index_select(0, index);
}

void OutputRestriction::expand(int64_t k) {
  if (!active()) return;
  allowed_ = allowed_.repeat_interleave(k, 0);                           // [N * k, V]
  if (blocked_.defined()) blocked_ = blocked_.repeat_interleave(k, 0);  // [N * k, U]
}

const at::Tensor& OutputRestriction::blocked_columns() {
  if (!blocked_.defined()) blocked_ = allowed_.index_select(1, columns_).logical_not();  // [N, U]
  return blocked_;
}

at::Tensor OutputRestriction::apply(const at::Tensor& log_probs) const {
  if (!active()) return log_probs;
  return torch::log_softmax(log_probs.masked_fill(allowed_.logical_not(), -std::numeric_limits<float>::infinity()), -1);
}

}  // namespace torchmt
