#include "primitives.h"

#include <cmath>
#include <limits>
#include <vector>

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include "bf16_bits.h"
#include "vector.h"
#include "parallel.h"

namespace torchmt::kernels {
namespace {

struct HeadView {
  int64_t heads, queries, keys, dim;
  int64_t group;                                        // query heads per K/V head (grouped-query attention)
  int64_t rows_per_kv;                                  // query rows per K/V and mask row (beams of a sentence)
  int64_t q_stride_b, q_stride_h, q_stride_t;           // q [B, H, Tq, d], last dim contiguous
  int64_t k_stride_b, k_stride_h, k_stride_t;           // k [B, H, Tk, d], last dim contiguous
  int64_t v_stride_b, v_stride_h, v_stride_t;           // v [B, H, Tk, d], last dim contiguous
  int64_t m_stride_b, m_stride_h, m_stride_q, m_stride_t;  // mask [B, H, Tq, Tk] (expanded), or none
  float scale;
};

// One head: scores of the keys [lo, hi) (the rest of the row is masked), softmax, weighted sum of
// the values, in 8-lane vectors: one AVX2 register (GCC moves 16-lane vectors through the stack
// in AVX2 code; the 16-lane version of this kernel spent most of its time there). DV > 0: the head
// dimension is DV * 8 and its output accumulators stay in registers (the generic loop, DV = 0,
// keeps them in memory: a store and a reload per key); the exponentials 8 at a time
// (exp_nonpositive; std::exp per key before).
template <int DV, typename T>
TORCHMT_VECTOR_INLINE void attend_head(const float* query, const T* k, int64_t k_stride_t, const T* v,
                                       int64_t v_stride_t, const bool* mh, int64_t m_stride_t, bool check_mask,
                                       int64_t lo, int64_t hi, int64_t dim, float* scores, T* out) {
  constexpr int kLanes8 = 8;
  const int64_t vec_end = DV > 0 ? DV * kLanes8 : dim - dim % kLanes8;
  float max = -std::numeric_limits<float>::infinity();
  bool finite = true;  // every allowed score
  for (int64_t t = lo; t < hi; ++t) {
    if (check_mask && !mh[t * m_stride_t]) {
      scores[t] = -std::numeric_limits<float>::infinity();
      continue;
    }
    const T* kt = k + t * k_stride_t;
    f32x8 even = f32x8{}, odd = f32x8{};  // two chains of adds
    int64_t j = 0;
    for (; j + 2 * kLanes8 <= vec_end; j += 2 * kLanes8) {
      even += load8_as_float(query + j) * load8_as_float(kt + j);
      odd += load8_as_float(query + j + kLanes8) * load8_as_float(kt + j + kLanes8);
    }
    if (j < vec_end) even += load8_as_float(query + j) * load8_as_float(kt + j);
    float dot = tree_sum16(even, odd);
    for (j = vec_end; j < dim; ++j) dot += query[j] * load_as_float(kt + j);
    scores[t] = dot;
    max = dot > max ? dot : max;
    finite = finite && std::isfinite(dot);
  }
  // exp(score - max) 8 at a time; the last, partial 8 through a copy padded with the maximum.
  // Scores with an inf or NaN (a broken model) take std::exp, whose NaNs propagate as ATen's do
  // (exp_nonpositive would clamp them).
  int64_t t = lo;
  const f32x8 max8 = f32x8{} + max;
  if (!finite)
    for (; t < hi; ++t) scores[t] = std::exp(scores[t] - max);
  for (; t + kLanes8 <= hi; t += kLanes8) {
    const f32x8 e = exp_nonpositive(load8_as_float(scores + t) - max8);
    std::memcpy(scores + t, &e, sizeof e);
  }
  if (t < hi) {
    float tail[kLanes8];
    for (int l = 0; l < kLanes8; ++l) tail[l] = t + l < hi ? scores[t + l] : max;
    const f32x8 e = exp_nonpositive(load8_as_float(tail) - max8);
    std::memcpy(tail, &e, sizeof e);
    for (int64_t l = 0; t + l < hi; ++l) scores[t + l] = tail[l];
  }
  float total = 0.0f;
  for (int64_t u = lo; u < hi; ++u) {
    if (check_mask && !mh[u * m_stride_t]) scores[u] = 0.0f;  // exp_nonpositive(-inf) is exp(-87), not 0
    total += scores[u];
  }
  const float inv_total = 1.0f / total;
  float* sum = scores + hi;  // the caller's buffer has dim floats after the keys
  if constexpr (DV > 0) {
    f32x8 acc[DV];
    for (int i = 0; i < DV; ++i) acc[i] = f32x8{};
    for (int64_t u = lo; u < hi; ++u) {
      const float w = scores[u] * inv_total;
      if (w == 0.0f) continue;
      const T* vt = v + u * v_stride_t;
      for (int i = 0; i < DV; ++i) acc[i] += w * load8_as_float(vt + i * kLanes8);
    }
    std::memcpy(sum, acc, sizeof acc);
  } else {
    std::fill(sum, sum + dim, 0.0f);
    for (int64_t u = lo; u < hi; ++u) {
      const float w = scores[u] * inv_total;
      if (w == 0.0f) continue;
      const T* vt = v + u * v_stride_t;
      for (int64_t j = 0; j < vec_end; j += kLanes8) {
        const f32x8 a = load8_as_float(sum + j) + w * load8_as_float(vt + j);
        std::memcpy(sum + j, &a, sizeof a);
      }
      for (int64_t j = vec_end; j < dim; ++j) sum[j] += w * load_as_float(vt + j);
    }
  }
  for (int64_t j = 0; j < dim; ++j) store_from_float(out + j, sum[j]);
}

// Heads [begin, end) of the flattened B x H, each of its query rows on its own (the same
// arithmetic for a row whatever the other rows are); out [B, Tq, H * d] contiguous.
template <typename T>
TORCHMT_VECTOR_INLINE void attend_heads(const T* q, const T* k, const T* v, const bool* mask, const HeadView& s,
                                        int64_t begin, int64_t end, T* out) {
  std::vector<float> scores(static_cast<size_t>(s.keys + s.dim));
  std::vector<float> query(static_cast<size_t>(s.dim));
  for (int64_t bh = begin; bh < end; ++bh) {
    const int64_t b = bh / s.heads, h = bh % s.heads, kb = b / s.rows_per_kv;
    const T* kh = k + kb * s.k_stride_b + (h / s.group) * s.k_stride_h;
    const T* vh = v + kb * s.v_stride_b + (h / s.group) * s.v_stride_h;
    for (int64_t row = 0; row < s.queries; ++row) {
      const T* qh = q + b * s.q_stride_b + h * s.q_stride_h + row * s.q_stride_t;
      for (int64_t j = 0; j < s.dim; ++j) query[j] = load_as_float(qh + j) * s.scale;
      const bool* mh = mask ? mask + kb * s.m_stride_b + h * s.m_stride_h + row * s.m_stride_q : nullptr;
      // Keys [lo, hi) hold every allowed one: source padding masks a row's last keys, a causal
      // mask the keys after the row's position, and in a batch that rows joined, a row's first
      // self-attention keys. Keys outside get weight exp(-inf) = 0 and add nothing, so skipping
      // them changes no bit and saves their work.
      int64_t lo = 0, hi = s.keys;
      if (mh) {
        while (lo < s.keys && !mh[lo * s.m_stride_t]) ++lo;
        while (hi > lo && !mh[(hi - 1) * s.m_stride_t]) --hi;
        if (lo == hi) lo = 0, hi = s.keys;  // nothing allowed: every key, as unmasked (ATen's rows of a uniform average)
      }
      const bool any_allowed = mh == nullptr || lo > 0 || hi < s.keys || mh[lo * s.m_stride_t];
      const bool check_mask = any_allowed && mh != nullptr;
      T* oh = out + ((b * s.queries + row) * s.heads + h) * s.dim;  // [B, Tq, H, d] = [B, Tq, D]
      float* sc = scores.data();
      switch (s.dim) {
        case 32: attend_head<4>(query.data(), kh, s.k_stride_t, vh, s.v_stride_t, mh, s.m_stride_t, check_mask, lo, hi, s.dim, sc, oh); break;
        case 64: attend_head<8>(query.data(), kh, s.k_stride_t, vh, s.v_stride_t, mh, s.m_stride_t, check_mask, lo, hi, s.dim, sc, oh); break;
        default: attend_head<0>(query.data(), kh, s.k_stride_t, vh, s.v_stride_t, mh, s.m_stride_t, check_mask, lo, hi, s.dim, sc, oh); break;
      }
    }
  }
}

TORCHMT_VECTOR_KERNEL(void, attend_heads_fp32, attend_heads, (const float* q, const float* k, const float* v, const bool* mask, const HeadView& s, int64_t begin, int64_t end, float* out),
                      (q, k, v, mask, s, begin, end, out))

TORCHMT_VECTOR_KERNEL(void, attend_heads_bf16, attend_heads, (const uint16_t* q, const uint16_t* k, const uint16_t* v, const bool* mask, const HeadView& s, int64_t begin, int64_t end, uint16_t* out),
                      (q, k, v, mask, s, begin, end, out))

bool last_dim_contiguous(const at::Tensor& t) { return t.stride(-1) == 1 || t.size(-1) == 1; }

}  // namespace

at::Tensor try_attention_rows_cpu(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                  const at::Tensor& mask_in) {
  if (at::GradMode::is_enabled() || !q_in.device().is_cpu() || q_in.dim() != 4 || q_in.size(2) == 0 ||
      k_in.dim() != 4 || v_in.dim() != 4)
    return {};
  const at::ScalarType dtype = q_in.scalar_type();
  if ((dtype != at::kFloat && dtype != at::kBFloat16) || k_in.scalar_type() != dtype || v_in.scalar_type() != dtype ||
      !k_in.device().is_cpu() || !v_in.device().is_cpu())
    return {};
  const int64_t batch = q_in.size(0), heads = q_in.size(1), queries = q_in.size(2), dim = q_in.size(3);
  const int64_t keys = k_in.size(2);
  const int64_t kv_heads = k_in.size(1), kv_batch = k_in.size(0);
  if (k_in.sizes() != v_in.sizes() || kv_batch == 0 || batch % kv_batch != 0 || kv_heads == 0 ||
      heads % kv_heads != 0 || k_in.size(3) != dim || keys == 0)
    return {};
  at::Tensor mask;
  if (mask_in.defined()) {
    if (mask_in.scalar_type() != at::kBool || !mask_in.device().is_cpu() || mask_in.dim() > 4) return {};
    const int64_t target[4] = {kv_batch, heads, queries, keys};  // right-aligned broadcast, one row per K/V row
    for (int64_t i = 0; i < mask_in.dim(); ++i) {
      const int64_t size = mask_in.size(mask_in.dim() - 1 - i);
      if (size != 1 && size != target[3 - i]) return {};
    }
    mask = mask_in.expand({kv_batch, heads, queries, keys});  // [B_kv, H, Tq, Tk], strides 0 where broadcast
  }
  RECORD_FUNCTION("torchmt::attention_rows", std::vector<c10::IValue>());
  const at::Tensor q = last_dim_contiguous(q_in) ? q_in : q_in.contiguous();
  const at::Tensor k = last_dim_contiguous(k_in) ? k_in : k_in.contiguous();
  const at::Tensor v = last_dim_contiguous(v_in) ? v_in : v_in.contiguous();

  HeadView s{};
  s.heads = heads;
  s.queries = queries;
  s.group = heads / kv_heads;
  s.rows_per_kv = batch / kv_batch;
  s.keys = keys;
  s.dim = dim;
  s.q_stride_b = q.stride(0);
  s.q_stride_h = q.stride(1);
  s.q_stride_t = q.stride(2);
  s.k_stride_b = k.stride(0);
  s.k_stride_h = k.stride(1);
  s.k_stride_t = k.stride(2);
  s.v_stride_b = v.stride(0);
  s.v_stride_h = v.stride(1);
  s.v_stride_t = v.stride(2);
  if (mask.defined()) {
    s.m_stride_b = mask.stride(0);
    s.m_stride_h = mask.stride(1);
    s.m_stride_q = mask.stride(2);
    s.m_stride_t = mask.stride(3);
  }
  s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
  at::Tensor out = at::empty({batch, queries, heads * dim}, q.options());  // [B, Tq, D]
  const bool* mp = mask.defined() ? mask.data_ptr<bool>() : nullptr;
  // Fork only when each thread gets ~64k multiply-adds.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / (2 * queries * keys * dim));
  if (dtype == at::kFloat) {
    parallel_for(0, batch * heads, grain, [&](int64_t b0, int64_t b1) {
      attend_heads_fp32(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), mp, s, b0, b1,
                        out.data_ptr<float>());
    });
  } else {
    parallel_for(0, batch * heads, grain, [&](int64_t b0, int64_t b1) {
      attend_heads_bf16(bf16_bits(q), bf16_bits(k), bf16_bits(v), mp, s, b0, b1, bf16_bits(out));
    });
  }
  return out;
}

}  // namespace torchmt::kernels
