#include <algorithm>
#include <cstring>
#include <vector>

#include <ATen/record_function.h>
#include <torch/torch.h>

#include "primitives.h"
#include "torchmt/util/device.h"
#include "vector.h"

namespace torchmt::kernels {
namespace {

// How far ahead (in nonzero inputs) the weight rows are prefetched: the rows a step reads are
// known from the list, scattered over a weight that does not stay in cache between steps.
constexpr int kPrefetchAhead = 4;

// out[n] = bias[n] + sum over the row's nonzero inputs k, ascending, of x[k] * wt[k, n]: one
// multiply-add per nonzero input and output, the output row (a few KB) kept in L1.
TORCHMT_VECTOR_INLINE void sparse_row(const float* x, const SparseInputWeights& w, int32_t* idx, float* out) {
  const int64_t K = w.in, N = w.out;
  int64_t count = 0;
  for (int64_t k = 0; k < K; ++k) {  // branch-free: every index written, the nonzero ones kept
    idx[count] = static_cast<int32_t>(k);
    count += x[k] != 0.0f;  // a NaN is nonzero: it reaches the outputs as in a dense product
  }
  std::copy(w.bias.begin(), w.bias.end(), out);
  const float* wt = w.transposed.data();
  const int64_t vec_end = N - N % 8;
  for (int64_t i = 0; i < count; ++i) {
    if (i + kPrefetchAhead < count) {
      const char* ahead = reinterpret_cast<const char*>(wt + idx[i + kPrefetchAhead] * N);
      for (int64_t line = 0; line < N * static_cast<int64_t>(sizeof(float)); line += 64)
        __builtin_prefetch(ahead + line, 0, 1);
    }
    const float v = x[idx[i]];
    const float* row = wt + idx[i] * N;
    const f32x8 xv = {v, v, v, v, v, v, v, v};
    for (int64_t n = 0; n < vec_end; n += 8) {
      f32x8 acc = load8_as_float(out + n);
      acc += xv * load8_as_float(row + n);
      std::memcpy(out + n, &acc, sizeof acc);
    }
    for (int64_t n = vec_end; n < N; ++n) out[n] += v * row[n];
  }
}

TORCHMT_VECTOR_KERNEL(void, sparse_rows, sparse_row,
                      (const float* x, const SparseInputWeights& w, int32_t* idx, float* out), (x, w, idx, out))

}  // namespace

std::shared_ptr<const SparseInputWeights> pack_sparse_input_weight(const at::Tensor& weight, const at::Tensor& bias) {
  TORCH_CHECK(weight.dim() == 2, "pack_sparse_input_weight: weight must be [out, in]");
  auto w = weight.detach().to(torch::kCPU, torch::kFloat).t().contiguous();  // [in, out]
  auto packed = std::make_shared<SparseInputWeights>();
  packed->in = w.size(0);
  packed->out = w.size(1);
  packed->transposed.assign(w.data_ptr<float>(), w.data_ptr<float>() + w.numel());
  packed->bias.assign(static_cast<size_t>(packed->out), 0.0f);
  if (bias.defined()) {
    auto b = bias.detach().to(torch::kCPU, torch::kFloat).contiguous();
    std::copy(b.data_ptr<float>(), b.data_ptr<float>() + packed->out, packed->bias.begin());
  }
  return packed;
}

at::Tensor try_sparse_input_linear(const SparseInputWeights& w, const at::Tensor& x) {
  if (at::GradMode::is_enabled() || !x.device().is_cpu() || x.scalar_type() != at::kFloat || x.dim() < 1 ||
      x.size(-1) != w.in || w.in == 0 || active_autocast_dtype(x.device()) != at::kFloat)
    return {};
  const int64_t M = x.numel() / w.in;
  if (M == 0 || M > kSmallBatchLinearMaxRows) return {};
  RECORD_FUNCTION("torchmt::sparse_input_linear", std::vector<c10::IValue>());
  const auto in = x.contiguous();
  auto out_shape = x.sizes().vec();
  out_shape.back() = w.out;
  auto y = torch::empty(out_shape, x.options());
  std::vector<int32_t> idx(static_cast<size_t>(w.in));
  for (int64_t m = 0; m < M; ++m)
    sparse_rows(in.data_ptr<float>() + m * w.in, w, idx.data(), y.data_ptr<float>() + m * w.out);
  return y;
}

}  // namespace torchmt::kernels
