#pragma once
// Position-wise feed-forward network (paper §3.3), mirrors the reference `FeedForward`:
// linear1 -> activation (ReLU as in the paper, GELU as in the reference code, or Marian's swish)
// -> dropout -> linear2.
#include <torch/nn/cloneable.h>
#include "torchmt/model/dropout.h"
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "torchmt/model/model_config.h"  // Activation

namespace torchmt {

struct FeedForwardOptions {
  FeedForwardOptions(int64_t embed_dim, int64_t ff_dim) : embed_dim_(embed_dim), ff_dim_(ff_dim) {}
  TORCH_ARG(int64_t, embed_dim);
  TORCH_ARG(int64_t, ff_dim);
  TORCH_ARG(double, dropout) = 0.1;
  TORCH_ARG(Activation, activation) = Activation::kReLU;
};

class FeedForwardImpl : public torch::nn::Cloneable<FeedForwardImpl> {
 public:
  explicit FeedForwardImpl(const FeedForwardOptions& options);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);  // [B, T, D] -> [B, T, D]

  FeedForwardOptions options;
  torch::nn::Linear linear1{nullptr}, linear2{nullptr};
  Dropout dropout{nullptr};
};
TORCH_MODULE(FeedForward);

}  // namespace torchmt
