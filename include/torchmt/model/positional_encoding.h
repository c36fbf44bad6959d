#pragma once
// Sinusoidal positional encoding (paper §3.5), mirrors the reference `PositionalEncoding`:
// buffer `pe` [1, max_positions, d_model] and a dropout applied after adding it. The table
// size (the document's `max_len`, 5000 there) is given by the model's configuration.
#include <torch/nn/cloneable.h>
#include "torchmt/model/dropout.h"
#include <torch/nn/pimpl.h>

namespace torchmt {

struct PositionalEncodingOptions {
  PositionalEncodingOptions(int64_t embed_dim, int64_t max_positions)
      : embed_dim_(embed_dim), max_positions_(max_positions) {}
  TORCH_ARG(int64_t, embed_dim);
  TORCH_ARG(int64_t, max_positions);
  TORCH_ARG(double, dropout) = 0.1;
};

class PositionalEncodingImpl : public torch::nn::Cloneable<PositionalEncodingImpl> {
 public:
  explicit PositionalEncodingImpl(const PositionalEncodingOptions& options);
  void reset() override;
  // x [B, T, D]; `offset` is the position of x's first row (incremental decoding).
  torch::Tensor forward(const torch::Tensor& x, int64_t offset = 0);

  PositionalEncodingOptions options;
  torch::Tensor pe;
  Dropout dropout{nullptr};
};
TORCH_MODULE(PositionalEncoding);

}  // namespace torchmt
