#pragma once
// The k best entries of each row of a [rows, n] score matrix, for the searches' per-step
// selection on the CPU: one pass per row that keeps a sorted list of k and looks at an entry
// only when it beats the k-th best (16 entries per compare with AVX-512). torch::topk sorted
// every row, a visible share of beam-search decoding (tools/bench/DECISIONS.md).
#include <cstdint>
#include <utility>

#include <ATen/core/Tensor.h>

namespace torchmt {

// Best first; equal values in index order; NaN counts as -inf. values/indices: [rows, k],
// k <= n.
void row_top_k(const float* x, int64_t rows, int64_t n, int64_t k, float* values, int64_t* indices);

// The same for a 2-D tensor: float32 on the CPU through the kernel above, anything else
// through torch::topk. Returns {values [rows, k], indices [rows, k] int64} on x's device.
std::pair<at::Tensor, at::Tensor> row_top_k(const at::Tensor& x, int64_t k);

}  // namespace torchmt
