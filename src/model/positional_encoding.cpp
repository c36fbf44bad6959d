#include "torchmt/model/positional_encoding.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include <torch/torch.h>

namespace torchmt {

PositionalEncodingImpl::PositionalEncodingImpl(const PositionalEncodingOptions& options_) : options(options_) {
  reset();
}

void PositionalEncodingImpl::reset() {
  const int64_t d = options.embed_dim();
  auto table = torch::zeros({options.max_positions(), d});
  auto position = torch::arange(0, options.max_positions(), torch::kFloat).unsqueeze(1);  // [L, 1]
  auto div_term = torch::exp(torch::arange(0, d, 2).to(torch::kFloat) * (-std::log(10000.0) / d));
  table.index_put_({torch::indexing::Slice(), torch::indexing::Slice(0, torch::indexing::None, 2)},
                   torch::sin(position * div_term));
  table.index_put_({torch::indexing::Slice(), torch::indexing::Slice(1, torch::indexing::None, 2)},
                   torch::cos(position * div_term).narrow(1, 0, d / 2));
  pe = register_buffer("pe", table.unsqueeze(0));  // [1, L, D]
  dropout = register_module("dropout", Dropout(options.dropout()));
}

torch::Tensor PositionalEncodingImpl::forward(const torch::Tensor& x, int64_t offset) {
  const int64_t length = x.size(1);
  if (offset + length > pe.size(1)) {
    throw std::out_of_range("sequence of " + std::to_string(offset + length) +
                            " positions exceeds the model's max_positions " + std::to_string(pe.size(1)));
  }
  return dropout(x + pe.narrow(1, offset, length).to(x.dtype()));
}

}  // namespace torchmt
