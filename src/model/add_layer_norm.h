#pragma once
// A residual sum and its LayerNorm, as the model's layers apply them.
#include <ATen/core/Tensor.h>
#include <torch/nn/modules/normalization.h>

namespace torchmt {

// norm(x + y), and x + y in *sum when sum is not null: one fused pass in CPU inference
// (kernels::try_add_layer_norm_cpu), else the two ATen ops (training, autocast, CUDA).
at::Tensor add_layer_norm(torch::nn::LayerNorm& norm, const at::Tensor& x, const at::Tensor& y,
                          at::Tensor* sum = nullptr);

}  // namespace torchmt
