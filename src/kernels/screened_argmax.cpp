#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <string>
#include <limits>

#include <torch/torch.h>

#include "int8_rule.h"
#include "primitives.h"
#include "vector.h"
#include "torchmt/util/device.h"

namespace torchmt::kernels {

// The int8 copy of a projection's weight and, per output row v, what bounds the distance
// between its int8 and fp32 logits. With w^ = s_v q (the int8 kernel's weight) and x^ its
// quantized input row, |x.w - x^.w^| <= sum_k |x_k| |w_k - w^_k| + sum_k |x_k - x^_k| |w^_k|
// <= min(max_error * |x|_1, error_l2 * |x|_2) + max_k |x_k - x^_k| * l1.
struct ScreenedProjection {
  int64_t out = 0, in = 0;
  std::shared_ptr<const Int8LinearWeights> int8;  // without the bias: it is added in fp32
  std::vector<float> max_error;                   // [out] max_k |w - w^|, rounded up
  std::vector<float> error_l2;                    // [out] |w - w^|_2, rounded up
  std::vector<float> l1;                          // [out] |w^|_1, rounded up
  std::vector<float> zero_bias;                   // [out] the scans' bias for a layer without one
  float max_of_max_error = 0, max_of_l1 = 0, max_abs_bias = 0;
  std::vector<float> mean_row;                    // [in] the mean of the weight rows
};

namespace {

std::atomic<int64_t> screened_rows{0}, open_rows{0}, screened_fp32_logits{0};

// TORCHMT_SCREENED_ARGMAX=0 (or a Runtime's screened_argmax) turns the screen off (A/B
// measurements; the same tokens either way).
bool screen_enabled() { return kernel_settings().screened_argmax; }
// TORCHMT_SCREENED_BEAM=0: beam search computes the whole projection (A/B measurements).
bool beam_screen_enabled() { return kernel_settings().screened_beam; }

// A row that leaves more candidates than this is cheaper through the full projection.
constexpr size_t kMaxCandidates = 512;

// Two fp32 logits closer than this are a near-tie: the log-softmax's rounding (its output is
// compared, not the logits) could make them equal, and the full row decides. Rounding moves a
// log-probability of magnitude below 100 by under 1e-5; this margin is 10x that and more.
double near_tie_margin(double logit) { return 1e-4 * (1.0 + std::fabs(logit)); }

float round_up(double v) {
  const auto f = static_cast<float>(v * (1.0 + 1e-9));
  return static_cast<double>(f) < v ? std::nextafter(f, std::numeric_limits<float>::infinity()) : f;
}

}  // namespace

std::shared_ptr<const ScreenedProjection> build_screen(const at::Tensor& weight_in, const at::Tensor& bias) {
  TORCH_CHECK(weight_in.dim() == 2 && weight_in.scalar_type() == at::kFloat && weight_in.device().is_cpu(),
              "build_screen: expected an fp32 CPU weight [V, K]");
  const at::Tensor weight = weight_in.contiguous();
  auto s = std::make_shared<ScreenedProjection>();
  if (bias.defined()) s->max_abs_bias = bias.abs().max().item<float>();
  s->out = weight.size(0);
  s->in = weight.size(1);
  s->int8 = quantize_linear_int8(weight, at::Tensor());
  const auto q = quantize_rows_int8(weight).first;  // the integers int8 holds, [out, in]
  const float* w = weight.data_ptr<float>();
  const int8_t* qd = q.data_ptr<int8_t>();
  s->max_error.resize(static_cast<size_t>(s->out));
  s->error_l2.resize(static_cast<size_t>(s->out));
  s->l1.resize(static_cast<size_t>(s->out));
  s->zero_bias.assign(static_cast<size_t>(s->out), 0.0f);
  for (int64_t v = 0; v < s->out; ++v) {
    const double scale = s->int8->scale[static_cast<size_t>(v)];
    double max_error = 0, squares = 0, l1 = 0;
    for (int64_t k = 0; k < s->in; ++k) {
      const double wq = scale * qd[v * s->in + k];  // exact in double
      const double e = std::fabs(static_cast<double>(w[v * s->in + k]) - wq);
      max_error = std::max(max_error, e);
      squares += e * e;
      l1 += std::fabs(wq);
    }
    s->max_error[static_cast<size_t>(v)] = round_up(max_error);
    s->error_l2[static_cast<size_t>(v)] = round_up(std::sqrt(squares));
    s->l1[static_cast<size_t>(v)] = round_up(l1);
    s->max_of_max_error = std::max(s->max_of_max_error, s->max_error[static_cast<size_t>(v)]);
    s->max_of_l1 = std::max(s->max_of_l1, s->l1[static_cast<size_t>(v)]);
  }
  const auto mean = weight.mean(0).contiguous();  // [in]
  s->mean_row.assign(mean.data_ptr<float>(), mean.data_ptr<float>() + s->in);
  return s;
}

std::shared_ptr<const ScreenedProjection> select_screen_rows(const ScreenedProjection& screen,
                                                             const std::vector<int64_t>& rows, const at::Tensor& weight,
                                                             const at::Tensor& bias) {
  TORCH_CHECK(weight.dim() == 2 && weight.size(0) == static_cast<int64_t>(rows.size()) && weight.size(1) == screen.in &&
                  weight.scalar_type() == at::kFloat && weight.device().is_cpu(),
              "select_screen_rows: expected the selected rows' fp32 CPU weight [", rows.size(), ", ", screen.in, "]");
  auto s = std::make_shared<ScreenedProjection>();
  if (bias.defined()) s->max_abs_bias = bias.abs().max().item<float>();
  s->out = static_cast<int64_t>(rows.size());
  s->in = screen.in;
  s->int8 = select_int8_rows(*screen.int8, rows);  // checks the rows
  for (int64_t v : rows) {
    const auto i = static_cast<size_t>(v);
    s->max_error.push_back(screen.max_error[i]);
    s->error_l2.push_back(screen.error_l2[i]);
    s->l1.push_back(screen.l1[i]);
    s->max_of_max_error = std::max(s->max_of_max_error, screen.max_error[i]);
    s->max_of_l1 = std::max(s->max_of_l1, screen.l1[i]);
  }
  s->zero_bias.assign(rows.size(), 0.0f);
  const auto mean = weight.mean(0).contiguous();  // [in]
  s->mean_row.assign(mean.data_ptr<float>(), mean.data_ptr<float>() + s->in);
  return s;
}

namespace {

// The scans of a row's V approximate logits (approx + bias, summed in float), vectorised: at 64
// rows a step scans V logits per row, and the scalar scan in double cost as much as the int8
// projection itself.
struct RowMax {
  int64_t index = 0;  // a largest sum (not necessarily the first: any one serves as the screen's start)
  bool nan = false;   // some sum is NaN
};

TORCHMT_VECTOR_INLINE RowMax row_max_body(const float* approx, const float* bias, int64_t n) {
  const f32x8 lanes = {0, 1, 2, 3, 4, 5, 6, 7};
  f32x8 best = f32x8{} - std::numeric_limits<float>::infinity(), at = {};
  i32x8 nan = {};
  int64_t v = 0;
  // Indices as floats: exact below 2^24, far above any vocabulary.
  for (; v + 8 <= n; v += 8) {
    const f32x8 sum = load8_as_float(approx + v) + load8_as_float(bias + v);
    nan |= sum != sum;
    const i32x8 more = sum > best;
    best = select<f32x8>(more, sum, best);
    at = select<f32x8>(more, lanes + static_cast<float>(v), at);
  }
  RowMax r;
  float top = -std::numeric_limits<float>::infinity();
  for (int l = 0; l < 8; ++l) {
    r.nan = r.nan || nan[l] != 0;
    if (best[l] > top) top = best[l], r.index = static_cast<int64_t>(at[l]);
  }
  for (; v < n; ++v) {
    const float sum = approx[v] + bias[v];
    r.nan = r.nan || sum != sum;
    if (sum > top) top = sum, r.index = v;
  }
  return r;
}
TORCHMT_VECTOR_KERNEL(RowMax, row_max, row_max_body, (const float* approx, const float* bias, int64_t n),
                      (approx, bias, n))

// Appends every v whose float sum approx[v] + bias[v] is at least `cutoff` to `out`.
TORCHMT_VECTOR_INLINE void collect_at_least_body(const float* approx, const float* bias, int64_t n, float cutoff,
                                                 std::vector<int64_t>* out) {
  int64_t v = 0;
  for (; v + 8 <= n; v += 8) {
    const i32x8 hit = load8_as_float(approx + v) + load8_as_float(bias + v) >= cutoff;
    uint64_t words[4];
    std::memcpy(words, &hit, sizeof words);
    if ((words[0] | words[1] | words[2] | words[3]) == 0) continue;
    for (int l = 0; l < 8; ++l)
      if (hit[l] != 0) out->push_back(v + l);
  }
  for (; v < n; ++v)
    if (approx[v] + bias[v] >= cutoff) out->push_back(v);
}
TORCHMT_VECTOR_KERNEL(void, collect_at_least, collect_at_least_body,
                      (const float* approx, const float* bias, int64_t n, float cutoff, std::vector<int64_t>* out),
                      (approx, bias, n, cutoff, out))

// What bounds the distance between a row's approximate (int8) and fp32 logits.
struct RowBounds {
  double amax = 0, l1x = 0, l2x = 0;
  double x_error = 0;   // the input's quantization error, per element
  double relative = 0;  // an fp32 sum's rounding, relative to the sum of |products| (and the bias)
  double order = 0;     // any summation order's rounding, for every output
  double widest = 0;    // |fp32 logit - approximate logit|, for every output

  double rounding(double l1w, double max_error, double b) const {
    return relative * ((l1w + static_cast<double>(in) * max_error) * amax + std::fabs(b)) + 1e-30;
  }
  // Output v's own bound (bias: its bias, or 0).
  double bound(const ScreenedProjection& s, int64_t v, float bias) const {
    const auto i = static_cast<size_t>(v);
    return (std::min(s.max_error[i] * l1x, s.error_l2[i] * l2x) + x_error * s.l1[i]) * 1.001 +
           rounding(s.l1[i], s.max_error[i], bias);
  }
  int64_t in = 0;
};

// False where the row has a non-finite input (the full projection decides it).
bool row_bounds(const ScreenedProjection& s, const float* x, RowBounds* b) {
  const int64_t K = s.in;
  b->in = K;
  double amax = 0, l1x = 0, l2x = 0;
  for (int64_t k = 0; k < K; ++k) {
    const double a = std::fabs(static_cast<double>(x[k]));
    if (!std::isfinite(a)) return false;
    amax = std::max(amax, a);
    l1x += a;
    l2x += a * a;
  }
  b->amax = amax;
  b->l1x = l1x;
  b->l2x = std::sqrt(l2x);
  // Half a quantization step of the input, at the coarsest (int8_rule.h), with room for the fp32
  // scale's rounding.
  b->x_error = amax / int8_rule::kSignedInputSteps * 0.501;
  // K + 1 adds in a row, each off by at most 2^-24, bound any summation order (beyond 8 rows the
  // full projection is a library GEMM whose order is not ours); the int8 path's scaling adds a
  // few 2^-24; with a margin.
  b->relative = 1e-5 + (static_cast<double>(K) + 8.0) * 0x1p-24;
  // The full projection sums the same products in another tile of the kernel, which may round
  // differently (the AVX-512 copy does, in the last bit): each fp32 logit is trusted only to
  // within `order`.
  b->order = b->rounding(s.max_of_l1, s.max_of_max_error, s.max_abs_bias);
  b->widest = (static_cast<double>(s.max_of_max_error) * l1x + b->x_error * s.max_of_l1) * 1.001 + b->order;
  return true;
}

// The largest float at most `low` less a relative slack: every v whose approximate logit's exact
// value reaches `low` has a float sum (within 2^-24 of it) at least this.
float float_cutoff(double low) {
  const double slack = 1e-6 * std::fabs(low) + 1e-30;
  auto cutoff = static_cast<float>(low - slack);
  if (static_cast<double>(cutoff) > low - slack) cutoff = std::nextafter(cutoff, -std::numeric_limits<float>::infinity());
  return cutoff;
}

// Row x's token, or -1 (see the header). approx: the row's int8 logits without the bias; bias:
// the projection's (zeros where it has none).
int64_t screen_row(const ScreenedProjection& s, const float* x, const float* approx, const float* w,
                   const float* bias, bool has_bias, int64_t& fp32_logits) {
  const int64_t K = s.in, V = s.out;
  RowBounds b;
  if (!row_bounds(s, x, &b)) return -1;
  auto logit = [&](int64_t v) { return static_cast<double>(approx[v]) + bias[v]; };

  const RowMax start = row_max(approx, bias, V);
  if (start.nan) return -1;
  const int64_t v0 = start.index;
  if (std::isinf(approx[v0])) return -1;  // every output blocked
  const double tau = small_batch_dot_fp32(x, w + v0 * K, has_bias ? bias + v0 : nullptr, K);
  ++fp32_logits;
  if (!std::isfinite(tau)) return -1;
  const double threshold = tau - near_tie_margin(tau) - 2 * b.order;
  // Every row whose fp32 logit may reach the threshold. First against the largest bound of
  // any row (in float first, below), then each such row against its own.
  std::vector<int64_t> above;
  collect_at_least(approx, bias, V, float_cutoff(threshold - b.widest), &above);
  std::vector<int64_t> candidates;
  for (const int64_t v : above) {
    if (v == v0 || logit(v) + b.widest < threshold) continue;
    if (logit(v) + b.bound(s, v, bias[v]) < threshold) continue;
    if (candidates.size() == kMaxCandidates) return -1;
    candidates.push_back(v);
  }
  int64_t best = v0;
  double best_logit = tau;
  std::vector<double> logits;
  logits.reserve(candidates.size());
  for (const int64_t v : candidates) {
    const double l = small_batch_dot_fp32(x, w + v * K, has_bias ? bias + v : nullptr, K);
    ++fp32_logits;
    if (!std::isfinite(l)) return -1;
    logits.push_back(l);
    if (l > best_logit) best_logit = l, best = v;
  }
  // Rows off the list are below the threshold, itself at most best - margin(best) - 2 order.
  const double tie = best_logit - near_tie_margin(best_logit) - 2 * b.order;
  if (best != v0 && tau >= tie) return -1;
  for (size_t i = 0; i < candidates.size(); ++i)
    if (candidates[i] != best && logits[i] >= tie) return -1;
  return best;
}

// ---- Beam search's step --------------------------------------------------------------------

// A row of approximate logits a (bias included) split at `cutoff`: every v with a[v] >= cutoff
// appended to `out`, and the sum of exp(a[v] - ref) over the others (ref >= every a[v]).
struct TailSplit {
  double tail = 0;
  bool nan = false;
};
TORCHMT_VECTOR_INLINE TailSplit split_tail_body(const float* a, int64_t n, float cutoff, float ref,
                                               std::vector<int64_t>* out) {
  f32x8 tail = {};
  i32x8 nan = {};
  int64_t v = 0;
  for (; v + 8 <= n; v += 8) {
    const f32x8 x = load8_as_float(a + v);
    nan |= x != x;
    const i32x8 hit = x >= cutoff;
    // A collected lane adds exp(-87) (exp_nonpositive's floor), far below the sum's rounding.
    tail += exp_nonpositive(select<f32x8>(hit, f32x8{} - 100.0f, x - ref));
    uint64_t words[4];
    std::memcpy(words, &hit, sizeof words);
    if ((words[0] | words[1] | words[2] | words[3]) == 0) continue;
    for (int l = 0; l < 8; ++l)
      if (hit[l] != 0) out->push_back(v + l);
  }
  TailSplit r;
  for (int l = 0; l < 8; ++l) {
    r.tail += tail[l];
    r.nan = r.nan || nan[l] != 0;
  }
  for (; v < n; ++v) {
    r.nan = r.nan || a[v] != a[v];
    if (a[v] >= cutoff) {
      out->push_back(v);
    } else {
      r.tail += std::exp(static_cast<double>(a[v]) - ref);
    }
  }
  return r;
}
TORCHMT_VECTOR_KERNEL(TailSplit, split_tail, split_tail_body,
                      (const float* a, int64_t n, float cutoff, float ref, std::vector<int64_t>* out),
                      (a, n, cutoff, ref, out))

// (x - x^) . m for the row x as the int8 kernel quantizes it (int8_rule.h).
double input_error_dot(const float* x, int64_t K, double amax, const float* m) {
  if (amax == 0) return 0;
  bool negative = false;
  for (int64_t k = 0; k < K; ++k) negative = negative || x[k] < 0;
  const double inverse = int8_rule::input_steps(negative) / amax;
  double dot = 0;
  for (int64_t k = 0; k < K; ++k) dot += (x[k] - std::nearbyint(x[k] * inverse) / inverse) * m[k];
  return dot;
}

// Within this of the row's best approximate logit every output's logit is computed in fp32; the
// normaliser's tail below takes the int8 ones (tools/bench/DECISIONS.md: the window against the
// log-probabilities' error and the fp32 logits it costs).
constexpr double kExactWindow = 6.0;
// A row that leaves more candidates than this is cheaper through the full projection.
constexpr size_t kMaxBeamCandidates = 2048;

// Row x's `width` best log-probabilities (best first, equal ones in index order) and those of the
// `extra` columns, or false where the full projection must compute the row. a: the row's
// approximate logits, bias included.
bool screen_top_k_row(const ScreenedProjection& s, const float* x, const float* a, const float* w,
                      const float* bias, int64_t width, const std::vector<int64_t>& extra, float* values,
                      int64_t* indices, float* extra_out, int64_t& fp32_logits) {
  const int64_t K = s.in, V = s.out;
  RowBounds b;
  if (!row_bounds(s, x, &b)) return false;
  auto exact = [&](int64_t v) {
    ++fp32_logits;
    return static_cast<double>(small_batch_dot_fp32(x, w + v * K, bias ? bias + v : nullptr, K));
  };
  // The approximate best `width`; their fp32 logits bound the row's width-th best from below.
  std::vector<float> top(static_cast<size_t>(width));
  std::vector<int64_t> top_index(static_cast<size_t>(width));
  row_top_k(a, 1, V, width, top.data(), top_index.data());
  if (!std::isfinite(top[0])) return false;
  double low = std::numeric_limits<double>::infinity();
  for (const int64_t v : top_index) {
    const double l = exact(v);
    if (!std::isfinite(l)) return false;
    low = std::min(low, l);
  }
  // Every output whose fp32 logit may reach low, less a near-tie margin: none left out can enter
  // the best `width` or tie with them.
  const double floor = low - near_tie_margin(low) - 2 * b.order;
  const double window = static_cast<double>(top[0]) - kExactWindow;
  const float cutoff = float_cutoff(std::min(floor - b.widest, window));
  // A float, so the tail's scan and the sums here subtract the same number.
  const double ref = static_cast<float>(static_cast<double>(top[0]) + b.widest * 1.001 + 1e-6 * std::fabs(top[0]));
  std::vector<int64_t> collected;
  TailSplit split = split_tail(a, V, cutoff, static_cast<float>(ref), &collected);
  if (split.nan || !std::isfinite(split.tail)) return false;
  // Outputs not collected are below floor in fp32. Of the collected, those whose own bound keeps
  // them below floor and that lie outside the window join the normaliser's approximate tail.
  std::vector<std::pair<double, int64_t>> logits;
  double head = 0;
  for (const int64_t v : collected) {
    if (a[v] < window && a[v] + b.bound(s, v, bias ? bias[v] : 0.0f) < floor) {
      split.tail += std::exp(static_cast<double>(a[v]) - ref);
      continue;
    }
    if (logits.size() == kMaxBeamCandidates) return false;
    const double l = exact(v);
    if (!std::isfinite(l)) return false;
    logits.emplace_back(l, v);
    head += std::exp(l - ref);
  }
  // The approximate best `width` are among them (their fp32 logits are at least low), so the
  // width-th best of the list is at least low: no output left out can reach it or tie with it.
  if (static_cast<int64_t>(logits.size()) < width) return false;
  auto better = [](const std::pair<double, int64_t>& p, const std::pair<double, int64_t>& q) {
    return p.first > q.first || (p.first == q.first && p.second < q.second);
  };
  std::partial_sort(logits.begin(), logits.begin() + width, logits.end(), better);
  // The tail's largest error is shared by all its outputs: the input's quantization error dx
  // meets every weight row, moving the tail's sum by about dx . (the tail's mean weight row); the
  // mean of all rows stands in for that mean (halves the normaliser's error on Multi30k models).
  split.tail *= std::exp(input_error_dot(x, K, b.amax, s.mean_row.data()));
  const double normaliser = ref + std::log(head + split.tail);
  for (int64_t i = 0; i < width; ++i) {
    values[i] = static_cast<float>(logits[static_cast<size_t>(i)].first - normaliser);
    indices[i] = logits[static_cast<size_t>(i)].second;
  }
  for (size_t e = 0; e < extra.size(); ++e) {
    const double l = exact(extra[e]);  // the same bits as when it was collected
    if (!std::isfinite(l)) return false;
    extra_out[e] = static_cast<float>(l - normaliser);
  }
  return true;
}

// Whether a screen built from weight/bias serves x [..., K] here: fp32 inference on the CPU, an
// instruction set with an int8 kernel (the portable int8 loop reads less but computes slower than
// the fp32 kernel streams).
bool screen_applies(const ScreenedProjection& screen, const at::Tensor& x, const at::Tensor& weight,
                    const at::Tensor& bias) {
  if (at::GradMode::is_enabled() || !x.defined() || !x.device().is_cpu() || x.scalar_type() != at::kFloat ||
      !weight.device().is_cpu() || weight.scalar_type() != at::kFloat || weight.dim() != 2 ||
      !weight.is_contiguous() || active_autocast_dtype(c10::Device(c10::kCPU)) != at::kFloat)
    return false;
  const int64_t V = weight.size(0), K = weight.size(1);
  if (K == 0 || V == 0 || x.dim() < 1 || x.size(-1) != K || x.numel() / K < 1) return false;
  if (bias.defined() && (!bias.device().is_cpu() || bias.scalar_type() != at::kFloat || bias.numel() != V ||
                         !bias.is_contiguous()))
    return false;
  return V == screen.out && K == screen.in && cpu_isa() != CpuIsa::kPortable;
}

}  // namespace

ScreenStats screen_stats() {
  return {screened_rows.load(), open_rows.load(), screened_fp32_logits.load()};
}

std::vector<int64_t> try_screened_argmax(const ScreenedProjection& screen, const at::Tensor& x,
                                         const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& blocked) {
  if (!screen_enabled() || !screen_applies(screen, x, weight, bias)) return {};
  const int64_t V = weight.size(0), K = weight.size(1);
  const int64_t rows = x.numel() / K;
  if (blocked.defined() && (!blocked.device().is_cpu() || blocked.scalar_type() != at::kBool || blocked.dim() != 2 ||
                            blocked.size(0) != rows || blocked.size(1) != V))
    return {};
  const at::Tensor input = x.reshape({rows, K}).contiguous();  // [N, K]
  const at::Tensor approx = int8_linear(input, *screen.int8);  // [N, V]
  // A blocked output's approximation is -inf: never the start, never a candidate.
  if (blocked.defined()) approx.masked_fill_(blocked, -std::numeric_limits<float>::infinity());
  const float* scan_bias = bias.defined() ? bias.data_ptr<float>() : screen.zero_bias.data();  // [V]
  std::vector<int64_t> tokens(static_cast<size_t>(rows));
  int64_t fp32_logits = 0, open = 0;
  for (int64_t m = 0; m < rows; ++m) {
    tokens[static_cast<size_t>(m)] =
        screen_row(screen, input.data_ptr<float>() + m * K, approx.data_ptr<float>() + m * V,
                   weight.data_ptr<float>(), scan_bias, bias.defined(), fp32_logits);
    open += tokens[static_cast<size_t>(m)] < 0 ? 1 : 0;
  }
  screened_rows += rows;
  open_rows += open;
  screened_fp32_logits += fp32_logits;
  return tokens;
}

bool try_screened_log_softmax_top_k(const ScreenedProjection& screen, const at::Tensor& x, const at::Tensor& weight,
                                    const at::Tensor& bias, int64_t width, const std::vector<int64_t>& extra,
                                    at::Tensor* values, at::Tensor* indices, at::Tensor* extra_values,
                                    std::vector<int64_t>* open) {
  if (!beam_screen_enabled() || !screen_applies(screen, x, weight, bias)) return false;
  const int64_t V = weight.size(0), K = weight.size(1);
  if (width < 1 || width > V) return false;
  for (const int64_t e : extra)
    if (e < 0 || e >= V) return false;
  const int64_t rows = x.numel() / K;
  const at::Tensor input = x.reshape({rows, K}).contiguous();  // [N, K]
  at::Tensor approx = int8_linear(input, *screen.int8);        // [N, V]
  if (bias.defined()) approx.add_(bias);
  *values = at::empty({rows, width}, at::kFloat);
  *indices = at::empty({rows, width}, at::kLong);
  *extra_values = at::empty({rows, static_cast<int64_t>(extra.size())}, at::kFloat);
  open->clear();
  int64_t fp32_logits = 0;
  for (int64_t m = 0; m < rows; ++m)
    if (!screen_top_k_row(screen, input.data_ptr<float>() + m * K, approx.data_ptr<float>() + m * V,
                          weight.data_ptr<float>(), bias.defined() ? bias.data_ptr<float>() : nullptr, width, extra,
                          values->data_ptr<float>() + m * width, indices->data_ptr<int64_t>() + m * width,
                          extra_values->data_ptr<float>() + m * static_cast<int64_t>(extra.size()), fp32_logits))
      open->push_back(m);
  screened_rows += rows;
  open_rows += static_cast<int64_t>(open->size());
  screened_fp32_logits += fp32_logits;
  return true;
}

}  // namespace torchmt::kernels
