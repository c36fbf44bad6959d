#include "torchmt/model/linear.h"

#include <torch/torch.h>

#include "torchmt/model/small_batch_linear.h"

namespace torchmt {

torch::Tensor apply_linear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  auto y = try_small_batch_linear_cpu(x, layer->weight, layer->bias);
  return y.defined() ? y : torch::linear(x, layer->weight, layer->bias);
}

}  // namespace torchmt
