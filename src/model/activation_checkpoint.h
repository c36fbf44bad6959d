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

// fn(inputs) -> outputs, recorded for autograd as one node. The recomputation in backward
// sees the same random state (dropout draws the same masks), the same autocast setting, and
// gradient mode on; gradients reach the inputs that require them and, through the
// recomputed graph, every parameter fn uses. Every output fn returns is connected to the
// graph, so a side result (a mixture of experts' load-balancing loss) is returned as a
// second output rather than kept aside. Without gradient mode it is fn(inputs).
using CheckpointedFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;
std::vector<at::Tensor> checkpoint(CheckpointedFn fn, const std::vector<at::Tensor>& inputs);

}  // namespace torchmt
