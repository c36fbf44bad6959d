#pragma once
// Sinusoidal positional encoding (paper §3.5), mirrors the reference `PositionalEncoding`:
// buffer `pe` [1, max_positions, d_model] and a dropout applied after adding it. The table
// size (the document's `max_len`, 5000 there) is given by the model's configuration.
//
// The same module holds the configuration's other position schemes (model_config.h):
//  - learned: `pe` is a parameter (same key and shape) drawn at initialisation;
//  - rope: nothing is added to the embeddings; buffers `cos` and `sin` [max_positions,
//    head_dim] are the rotary tables that self-attention applies to queries and keys
//    (rotary.h), handed out per position range by rotary().
#include <utility>

#include <torch/nn/cloneable.h>
#include "torchmt/model/dropout.h"
#include "torchmt/model/model_config.h"
#include <torch/nn/pimpl.h>

namespace torchmt {

struct PositionalEncodingOptions {
  PositionalEncodingOptions(int64_t embed_dim, int64_t max_positions)
      : embed_dim_(embed_dim), max_positions_(max_positions) {}
  TORCH_ARG(int64_t, embed_dim);
  TORCH_ARG(int64_t, max_positions);
  TORCH_ARG(double, dropout) = 0.1;
  TORCH_ARG(Positions, kind) = Positions::kSinusoidal;
  TORCH_ARG(int64_t, head_dim) = 0;  // rope: the width each attention head rotates
};

class PositionalEncodingImpl : public torch::nn::Cloneable<PositionalEncodingImpl> {
 public:
  explicit PositionalEncodingImpl(const PositionalEncodingOptions& options);
  void reset() override;
  // x [B, T, D]; `offset` is the position of x's first row (incremental decoding).
  torch::Tensor forward(const torch::Tensor& x, int64_t offset = 0);
  // forward() for x [B, 1, D] with one position per row, `positions` [B] int64 on x's device (rows of a
  // running decoding batch that joined at different steps). The same table entries as the
  // offset form; the caller checks the range (a device tensor is not read back here).
  torch::Tensor forward_at(const torch::Tensor& x, const torch::Tensor& positions);
  // rope: (cos, sin) [length, head_dim] of positions offset..offset+length-1, in `dtype`;
  // undefined tensors for the other schemes.
  std::pair<torch::Tensor, torch::Tensor> rotary(int64_t offset, int64_t length, c10::ScalarType dtype) const;
  // rope: (cos, sin) [B, 1, 1, head_dim], row b at positions[b], for one query per row.
  std::pair<torch::Tensor, torch::Tensor> rotary(const torch::Tensor& positions, c10::ScalarType dtype) const;
  // Throws past the table, as forward() and rotary() do for an offset and length.
  void check_positions(int64_t end) const;
  // Fresh weights of a learned table (normal, std d^-1/2 like the embeddings).
  void reset_parameters();

  PositionalEncodingOptions options;
  torch::Tensor pe;         // sinusoidal (buffer), learned (parameter)
  torch::Tensor cos, sin;   // rope (buffers)
  Dropout dropout{nullptr};
};
TORCH_MODULE(PositionalEncoding);

}  // namespace torchmt
