#pragma once
// How every torch::nn::Linear in the model is applied.
//
// The C++ frontend's Linear::forward computes `matmul(x, W^T)` and then `+= bias` for
// inputs of rank > 2. Under autocast the in-place add is not cast, so an fp32 bias is added
// into a bf16 output through TensorIterator's mixed-dtype path (the output copied to fp32
// and back): measured 20% of a small-model bf16 training step on this project's CPU.
// at::linear, which Python's nn.Linear calls, is autocast-aware and fuses the bias into addmm.
#include <torch/nn/modules/linear.h>

namespace torchmt {

torch::Tensor apply_linear(const torch::nn::Linear& layer, const torch::Tensor& x);

}  // namespace torchmt
