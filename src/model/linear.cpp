#include "torchmt/model/linear.h"

#include <torch/torch.h>

namespace torchmt {

torch::Tensor apply_linear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  return torch::linear(x, layer->weight, layer->bias);
}

}  // namespace torchmt
