#pragma once
// Inverted dropout, the role of the reference's nn.Dropout (no parameters, so state dicts
// are unchanged). On CPU the keep mask comes from a counter-based hash of (seed, element
// index) instead of ATen's per-element Bernoulli sampling, which was a large share of a CPU
// training step (tools/bench/DECISIONS.md); the seed is drawn from the
// default CPU generator, so torch::manual_seed and the checkpointed RNG state still make a
// run reproducible, and the result does not depend on the number of threads. The mask is
// not stored: backward recomputes it from the seed. Other devices use torch::dropout.
#include <cstdint>

#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>

namespace torchmt {

class DropoutImpl : public torch::nn::Cloneable<DropoutImpl> {
 public:
  explicit DropoutImpl(double p = 0.5);
  void reset() override {}
  torch::Tensor forward(const torch::Tensor& x);
  // x + forward(y), a residual connection: in CPU training (x and y both fp32, both bf16, or fp32
  // and bf16) one fused pass each way (kernels::residual_dropout_forward: forward's mask for the
  // seed it draws).
  torch::Tensor residual(const torch::Tensor& x, const torch::Tensor& y);
  // forward(softmax(scores * scale)) over the keys `mask` allows (bool, broadcast to scores
  // [B, H, Tq, Tk]; a row with none allowed takes every key unless the caller has done that:
  // mask_sanitized): attention's weights, the softmax before dropout also in *softmax_out if
  // asked. In CPU training (fp32 or bf16 scores, no softmax_out) one fused pass each way
  // (kernels::attention_softmax_dropout_forward: forward's mask for the seed it draws).
  torch::Tensor attention(const torch::Tensor& scores, const torch::Tensor& mask, double scale,
                          bool mask_sanitized = false, torch::Tensor* softmax_out = nullptr);

  double p;
};
TORCH_MODULE(Dropout);

// x * keep / (1 - p) with keep[i] = hash(seed, i) >= p (CPU, contiguous result); differentiable.
torch::Tensor hashed_dropout(const torch::Tensor& x, double p, uint64_t seed);

// dropout(relu(h + bias), p) (p = 0: none): a feed-forward layer's hidden activation in training,
// from its first Linear's output without the bias, in h's dtype. On the CPU in fp32 or bf16 one
// fused pass each way (kernels::bias_relu_dropout_forward: Dropout's mask for the seed it draws),
// elsewhere the separate ops; differentiable in h and bias.
torch::Tensor bias_relu_dropout(const torch::Tensor& h, const torch::Tensor& bias, double p);

}  // namespace torchmt
