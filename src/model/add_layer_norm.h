#pragma once
// A residual sum and its LayerNorm, as the model's layers apply them.
#include <ATen/core/Tensor.h>
#include <torch/nn/modules/normalization.h>

#include "torchmt/model/dropout.h"

namespace torchmt {

// norm(x): in CPU training (fp32 or bf16 x, fp32 parameters) one pass each way
// (kernels::layer_norm_training_forward / _backward), else the module.
at::Tensor layer_norm(torch::nn::LayerNorm& norm, const at::Tensor& x);

// norm(x + y), and x + y in *sum when sum is not null: one fused pass in CPU inference
// (kernels::try_add_layer_norm_cpu), else the sum and layer_norm (training, autocast, CUDA).
at::Tensor add_layer_norm(torch::nn::LayerNorm& norm, const at::Tensor& x, const at::Tensor& y,
                          at::Tensor* sum = nullptr);

// norm(x + dropout(y)) and that sum in *sum: in training the sum is dropout->residual(x, y) (one
// fused pass on the CPU), else add_layer_norm(norm, x, y, sum) (dropout is the identity there).
at::Tensor add_layer_norm(torch::nn::LayerNorm& norm, const at::Tensor& x, const at::Tensor& y, Dropout& dropout,
                          at::Tensor* sum = nullptr);

}  // namespace torchmt
