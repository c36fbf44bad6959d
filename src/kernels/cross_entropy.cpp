#include "primitives.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include "vector.h"
#include "parallel.h"

namespace torchmt::kernels {
namespace {

struct RowParams {
  int64_t vocab;
  double smoothing;
  bool want_grad;
};

struct RowResult {
  double loss = 0, nll = 0;
};

// Loads one row into fp32 scratch `x` and returns its max and sum.
template <typename Load16, typename Load1>
TORCHMT_VECTOR_INLINE void load_row(Load16 load16, Load1 load1, int64_t vocab, float* x, float* max_out,
                                    float* sum_out) {
  f32x16 lane_max = splat(-3.4e38f), lane_sum = splat(0.0f);
  int64_t j = 0;
  for (; j + kLanes <= vocab; j += kLanes) {
    const f32x16 v = load16(j);
    store16(x + j, v);
    lane_max = max_lanes(v, lane_max);
    lane_sum += v;
  }
  float max = max_of16(lane_max), sum = sum16(lane_sum);
  for (; j < vocab; ++j) {
    x[j] = load1(j);
    max = x[j] > max ? x[j] : max;
    sum += x[j];
  }
  *max_out = max;
  *sum_out = sum;
}

// x[j] <- exp(x[j] - max); returns the sum.
TORCHMT_VECTOR_INLINE float exponentiate_row(float* x, int64_t vocab, float max) {
  f32x16 lane_sum = splat(0.0f);
  int64_t j = 0;
  for (; j + kLanes <= vocab; j += kLanes) {
    const f32x16 e = exp_nonpositive(load16(x + j) - max);
    store16(x + j, e);
    lane_sum += e;
  }
  if (j < vocab) {  // the tail through one padded vector
    float tail[kLanes];
    const int64_t n = vocab - j;
    for (int l = 0; l < kLanes; ++l) tail[l] = l < n ? x[j + l] - max : -87.0f;
    const f32x16 e = exp_nonpositive(load16(tail));
    for (int64_t l = 0; l < n; ++l) lane_sum[l] += x[j + l] = e[l];
  }
  return sum16(lane_sum);
}

// loss = (1 - eps) (log Z - x_gold) + eps / V (V log Z - sum_j x_j), the smoothed
// cross-entropy written with log Z = max + log sum exp(x - max).
TORCHMT_VECTOR_INLINE RowResult row_loss(float max, float sum, float sum_exp, float gold_logit, const RowParams& p) {
  const double log_z = static_cast<double>(max) + std::log(static_cast<double>(sum_exp));
  RowResult r;
  r.nll = log_z - static_cast<double>(gold_logit);
  r.loss = (1.0 - p.smoothing) * r.nll +
           p.smoothing / static_cast<double>(p.vocab) * (static_cast<double>(p.vocab) * log_z - sum);
  return r;
}

// One row of logits [V] (fp32 or bf16 bits): loss, nll, and when wanted
// d loss / d logits = softmax - eps / V - (1 - eps) [j == gold], written in the same dtype.
TORCHMT_VECTOR_INLINE RowResult row_f32_body(const float* row, int64_t gold, float* grad, float* x, RowParams p) {
  float max, sum;
  auto load_vector = [row](int64_t j) __attribute__((always_inline)) { return load16(row + j); };
  auto load_scalar = [row](int64_t j) __attribute__((always_inline)) { return row[j]; };
  load_row(load_vector, load_scalar, p.vocab, x, &max, &sum);
  const float sum_exp = exponentiate_row(x, p.vocab, max);
  const RowResult r = row_loss(max, sum, sum_exp, row[gold], p);
  if (p.want_grad) {
    const float inv = 1.0f / sum_exp, spread = static_cast<float>(p.smoothing / static_cast<double>(p.vocab));
    int64_t j = 0;
    for (; j + kLanes <= p.vocab; j += kLanes) store16(grad + j, load16(x + j) * inv - spread);
    for (; j < p.vocab; ++j) grad[j] = x[j] * inv - spread;
    grad[gold] -= static_cast<float>(1.0 - p.smoothing);
  }
  return r;
}

TORCHMT_VECTOR_INLINE RowResult row_bf16_body(const uint16_t* row, int64_t gold, uint16_t* grad, float* x,
                                             RowParams p) {
  float max, sum;
  auto load_vector = [row](int64_t j) __attribute__((always_inline)) { return load16_bf16(row + j); };
  auto load_scalar = [row](int64_t j) __attribute__((always_inline)) { return bf16_to_float(row[j]); };
  load_row(load_vector, load_scalar, p.vocab, x, &max, &sum);
  const float sum_exp = exponentiate_row(x, p.vocab, max);
  const RowResult r = row_loss(max, sum, sum_exp, bf16_to_float(row[gold]), p);
  if (p.want_grad) {
    const float inv = 1.0f / sum_exp, spread = static_cast<float>(p.smoothing / static_cast<double>(p.vocab));
    int64_t j = 0;
    for (; j + kLanes <= p.vocab; j += kLanes) store16_bf16(grad + j, load16(x + j) * inv - spread);
    for (; j < p.vocab; ++j) grad[j] = float_to_bf16(x[j] * inv - spread);
    grad[gold] = float_to_bf16(x[gold] * inv - spread - static_cast<float>(1.0 - p.smoothing));
  }
  return r;
}

TORCHMT_VECTOR_KERNEL(RowResult, row_f32, row_f32_body, (const float* row, int64_t gold, float* grad, float* x, RowParams p),
                      (row, gold, grad, x, p))
TORCHMT_VECTOR_KERNEL(RowResult, row_bf16, row_bf16_body, (const uint16_t* row, int64_t gold, uint16_t* grad, float* x, RowParams p),
                      (row, gold, grad, x, p))

// Rows are independent: split them over threads; padding rows give 0 and a zero gradient.
template <typename scalar_t, typename RowFn>
void rows_kernel(const scalar_t* logits, const int64_t* target, scalar_t* grad, int64_t rows, RowParams p,
                 int64_t pad_id, double* row_loss_out, double* row_nll_out, RowFn row_fn) {
  parallel_for(0, rows, 8, [&](int64_t begin, int64_t end) {
    std::vector<float> x(static_cast<size_t>(p.vocab));
    for (int64_t r = begin; r < end; ++r) {
      scalar_t* g = p.want_grad ? grad + r * p.vocab : nullptr;
      if (target[r] == pad_id) {
        row_loss_out[r] = row_nll_out[r] = 0.0;
        if (g) std::memset(static_cast<void*>(g), 0, sizeof(scalar_t) * static_cast<size_t>(p.vocab));
        continue;
      }
      const RowResult result = row_fn(logits + r * p.vocab, target[r], g, x.data(), p);
      row_loss_out[r] = result.loss;
      row_nll_out[r] = result.nll;
    }
  });
}

}  // namespace

void label_smoothed_cross_entropy_rows(const float* logits, const int64_t* target, int64_t rows, int64_t vocab,
                                       double smoothing, int64_t pad_id, double* loss, double* nll, float* grad) {
  rows_kernel(logits, target, grad, rows, RowParams{vocab, smoothing, grad != nullptr}, pad_id, loss, nll, row_f32);
}

void label_smoothed_cross_entropy_rows(const uint16_t* logits, const int64_t* target, int64_t rows, int64_t vocab,
                                       double smoothing, int64_t pad_id, double* loss, double* nll, uint16_t* grad) {
  rows_kernel(logits, target, grad, rows, RowParams{vocab, smoothing, grad != nullptr}, pad_id, loss, nll, row_bf16);
}

}  // namespace torchmt::kernels
