#pragma once
// Element-wise steps of a layer fused into one pass for CPU inference.
//
// Why: a decoding step of one sentence is dispatch-bound, not arithmetic-bound. Each ATen op
// costs a few microseconds of dispatch and allocation whatever its size, and with one row of
// 256 values the arithmetic is tens of nanoseconds. Rotary positions were 8 ops per tensor
// (two narrows, a negation, a concatenation, three products and a sum), a residual sum and
// its LayerNorm 2 ops with 4 outputs allocated. Here each is one pass and one allocation.
//
// Both return an undefined tensor when they do not apply (gradients on, autocast on, not the
// CPU, a dtype other than fp32/bf16, shapes they do not handle); the caller then runs the
// ATen composite, which is also what training differentiates. bf16 results are rounded where
// the composite rounds them, so both paths agree to rounding.
#include <utility>

#include <ATen/core/Tensor.h>

namespace torch::nn {
class LayerNorm;
}

namespace torchmt {

// x cos + rotate_half(x) sin (apply_rotary_pos_emb for one tensor) for x [B, H, T, d_k] with a
// contiguous last dimension; cos and sin broadcast to x. Values agree with the composite to
// rounding (the compiler may fuse a product and the sum into one FMA).
at::Tensor try_rotary_cpu(const at::Tensor& x, const at::Tensor& sin, const at::Tensor& cos);

// {x + y, layer_norm(x + y)} over the last dimension (weight and bias of that size, x's dtype).
// The normalisation runs in fp32 (as ATen's does for bf16 input); values agree with the
// composite to rounding (~1e-7 relative in fp32).
std::pair<at::Tensor, at::Tensor> try_add_layer_norm_cpu(const at::Tensor& x, const at::Tensor& y,
                                                         const at::Tensor& weight, const at::Tensor& bias, double eps);

// x = log_softmax(x, -1) in place for an fp32 CPU tensor [rows, n], contiguous, outside autograd
// (the decoder's vocabulary scores: no second [rows, vocabulary] buffer, and exponentials in AVX2
// registers); false, leaving x alone, where it does not apply. Values agree with ATen's to ~1e-6
// absolute (its exp is Sleef's, this one exp_nonpositive, ~2e-7 relative).
bool try_log_softmax_in_place_cpu(at::Tensor& x);

// norm(x + y), and x + y in *sum when sum is not null: the fused pass where it applies,
// else the two ATen ops (training, autocast, CUDA).
at::Tensor add_layer_norm(torch::nn::LayerNorm& norm, const at::Tensor& x, const at::Tensor& y,
                          at::Tensor* sum = nullptr);

}  // namespace torchmt
