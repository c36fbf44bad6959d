#pragma once
// Activation checkpointing (reference 002's CheckpointTransformerLayer, PyTorch's
// torch.utils.checkpoint, which LibTorch's C++ API lacks): run a layer without keeping the
// activations its backward needs, and recompute them in backward. Memory for the graph drops
// from every intermediate of every layer to the layers' inputs; the price is a second forward
// of each layer during backward.
#include <functional>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torchmt {

// fn(inputs) -> output, recorded for autograd as one node. The recomputation in backward
// sees the same random state (dropout draws the same masks), the same autocast setting, and
// gradient mode on; gradients reach the inputs that require them and, through the
// recomputed graph, every parameter fn uses. Without gradient mode it is fn(inputs).
at::Tensor checkpoint(std::function<at::Tensor(const std::vector<at::Tensor>&)> fn, const std::vector<at::Tensor>& inputs);

}  // namespace torchmt
