#pragma once
// A linear layer applied to a handful of rows on the CPU (the decoding step of one sentence).
#include <ATen/core/Tensor.h>

namespace torchmt {

// The most rows (product of all but the last dimension of x) the kernel takes; above it
// MKL / oneDNN's blocked GEMMs are faster.
constexpr int64_t kSmallBatchLinearMaxRows = 8;

// x W^T + b when the call is inference (grad mode off) on the CPU with at most
// kSmallBatchLinearMaxRows rows, fp32 or bf16 (including CPU bf16 autocast, which it
// honours like at::linear: bf16 inputs through autocast's weight cache, bf16 output).
// Returns an undefined tensor when it does not apply; the caller then uses at::linear.
//
// Why: one decoding step of one sentence multiplies 1-5 rows by every weight matrix of the
// decoder, so the step is weight reading. At those shapes MKL's sgemm and oneDNN's bf16
// matmul read the weights far below memory bandwidth and pay a fixed setup cost that
// dominates such small matrices (tools/bench/DECISIONS.md);
// this kernel streams each weight row once through fp32 FMAs against all rows at once.
// bf16 uses AVX512-BF16 dot products where the CPU has them (unless use_bf16_dot is false,
// for tests), and fp32 FMAs on the widened values otherwise.
at::Tensor try_small_batch_linear_cpu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                      bool use_bf16_dot = true);

// One fp32 output of that kernel: x . w_row (+ *bias when bias is not null) for one row x of K
// values, bit for bit the value try_small_batch_linear_cpu gives that output (every output of
// a row is summed alike, whatever the number of rows).
float small_batch_dot_fp32(const float* x, const float* w_row, const float* bias, int64_t K);

}  // namespace torchmt
