#pragma once
// Mixture of experts in place of a layer's feed-forward network, mirrors reference 002's
// `MoELayer`: `experts` (FeedForward networks), `gate` (Linear d_model -> experts), `top_k`.
// Each token's gate probabilities (softmax) pick its top_k experts, and the output is the sum
// of those experts' outputs weighted by their probabilities, as the document computes it.
//
// Unlike the document's teaching code, which runs every expert on every token and masks,
// tokens are dispatched: each expert runs on the rows routed to it only (index_select), and
// its weighted output is added back to those rows (index_add_).
//
// Load balancing (Switch Transformer / GShard): aux_loss = experts * sum_e f_e * P_e, with f_e
// the share of the N x top_k assignments that went to expert e and P_e the mean gate
// probability of e; 1 when balanced, up to `experts` when every token goes to one expert.
// forward() leaves it in `aux_loss` for the training step (coefficient: train --moe-aux-loss).
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "torchmt/model/feed_forward.h"

namespace torchmt {

struct MoELayerOptions {
  MoELayerOptions(int64_t embed_dim, int64_t ff_dim, int64_t num_experts)
      : embed_dim_(embed_dim), ff_dim_(ff_dim), num_experts_(num_experts) {}
  TORCH_ARG(int64_t, embed_dim);
  TORCH_ARG(int64_t, ff_dim);
  TORCH_ARG(int64_t, num_experts);
  TORCH_ARG(int64_t, top_k) = 2;
  TORCH_ARG(double, dropout) = 0.1;
  TORCH_ARG(Activation, activation) = Activation::kReLU;
};

class MoELayerImpl : public torch::nn::Cloneable<MoELayerImpl> {
 public:
  explicit MoELayerImpl(const MoELayerOptions& options);
  void reset() override;
  // x [..., D] -> [..., D]; sets aux_loss and tokens_per_expert.
  torch::Tensor forward(const torch::Tensor& x);

  MoELayerOptions options;
  torch::nn::ModuleList experts{nullptr};
  torch::nn::Linear gate{nullptr};
  int64_t top_k = 2;

  torch::Tensor aux_loss;            // scalar (fp32), from the last forward()
  std::vector<int64_t> tokens_per_expert;  // rows each expert ran on in the last forward()
};
TORCH_MODULE(MoELayer);

}  // namespace torchmt
