#include <algorithm>
#include <vector>

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include "primitives.h"
#include "vector.h"
#include "parallel.h"

namespace torchmt::kernels {
namespace {

// Elements per chunk: each chunk's sum is taken alone and the chunks' sums added in order, so the
// result is the same on any thread count.
constexpr int64_t kChunk = 16384;

// The sum of p[0..n)^2: four 16-lane fp32 accumulators (at most kChunk / 64 terms each), then double.
TORCHMT_VECTOR_INLINE double squares_body(const float* p, int64_t n) {
  f32x16 a = splat(0.0f), b = splat(0.0f), c = splat(0.0f), d = splat(0.0f);
  int64_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    const f32x16 x0 = load16(p + i), x1 = load16(p + i + kLanes), x2 = load16(p + i + 2 * kLanes),
                 x3 = load16(p + i + 3 * kLanes);
    a += x0 * x0;
    b += x1 * x1;
    c += x2 * x2;
    d += x3 * x3;
  }
  double total = static_cast<double>(tree_sum16((a + b) + (c + d)));
  for (; i < n; ++i) total += static_cast<double>(p[i]) * p[i];
  return total;
}

TORCHMT_VECTOR_KERNEL(double, squares, squares_body, (const float* p, int64_t n), (p, n))

}  // namespace

bool sum_of_squares_applies(const std::vector<at::Tensor>& tensors) {
  return std::all_of(tensors.begin(), tensors.end(), [](const at::Tensor& t) {
    return t.defined() && t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous();
  });
}

at::Tensor sum_of_squares(const std::vector<at::Tensor>& tensors) {
  RECORD_FUNCTION("torchmt::sum_of_squares", std::vector<c10::IValue>{});
  TORCH_CHECK(sum_of_squares_applies(tensors), "sum_of_squares takes contiguous fp32 CPU tensors");
  struct Chunk {
    const float* p;
    int64_t n;
  };
  std::vector<Chunk> chunks;
  for (const auto& t : tensors) {
    const float* p = t.data_ptr<float>();
    for (int64_t i = 0; i < t.numel(); i += kChunk) chunks.push_back({p + i, std::min(kChunk, t.numel() - i)});
  }
  std::vector<double> sums(chunks.size());
  parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) sums[k] = squares(chunks[k].p, chunks[k].n);
  });
  double total = 0.0;
  for (const double s : sums) total += s;
  return at::scalar_tensor(total, at::TensorOptions().dtype(at::kFloat));
}

}  // namespace torchmt::kernels
