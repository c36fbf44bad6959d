#include "torchmt/model/feed_forward.h"

#include <stdexcept>

#include <torch/torch.h>

#include "model/linear.h"

namespace torchmt {

FeedForwardImpl::FeedForwardImpl(const FeedForwardOptions& options_) : options(options_) { reset(); }

void FeedForwardImpl::reset() {
  linear1 = register_module("linear1", make_linear(options.embed_dim(), options.ff_dim()));
  linear2 = register_module("linear2", make_linear(options.ff_dim(), options.embed_dim()));
  if (auto* q = dynamic_cast<QuantizableLinearImpl*>(linear2.get()))
    q->sparse_input = options.activation() == Activation::kReLU;
  dropout = register_module("dropout", Dropout(options.dropout()));
}

torch::Tensor FeedForwardImpl::forward(const torch::Tensor& x) {
  if (options.activation() == Activation::kReLU && is_training() && x.device().is_cpu() && linear1->bias.defined()) {
    // CPU training: the bias, ReLU and dropout as one pass each way (bias_relu_dropout).
    auto h = torch::linear(x, linear1->weight);  // [..., F], the bias added in the fused pass
    return apply_linear(linear2, bias_relu_dropout(h, linear1->bias, dropout->p));
  }
  auto h = apply_linear(linear1, x);
  switch (options.activation()) {
    case Activation::kGELU: h = torch::gelu(h); break;
    case Activation::kSwish: h = torch::silu(h); break;
    default: h = torch::GradMode::is_enabled() ? torch::relu(h) : h.relu_();  // in inference: no new tensor
  }
  return apply_linear(linear2, dropout(h));
}

}  // namespace torchmt
