#include "torchmt/model/single_query_attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include "../util/cpu_vector_kernels.h"

namespace torchmt {
namespace {

using namespace cpu_kernels;

struct HeadView {
  int64_t heads, keys, dim;
  int64_t group;                                        // query heads per K/V head (grouped-query attention)
  int64_t rows_per_kv;                                  // query rows per K/V and mask row (beams of a sentence)
  int64_t q_stride_b, q_stride_h;                       // q [B, H, 1, d], last dim contiguous
  int64_t k_stride_b, k_stride_h, k_stride_t;           // k [B, H, Tk, d], last dim contiguous
  int64_t v_stride_b, v_stride_h, v_stride_t;           // v [B, H, Tk, d], last dim contiguous
  int64_t m_stride_b, m_stride_h, m_stride_t;           // mask [B, H, 1, Tk] (expanded), or none
  float scale;
};

// Heads [begin, end) of the flattened B x H; out [B, 1, H * d] contiguous.
template <typename T>
TORCHMT_VECTOR_INLINE void attend_heads(const T* q, const T* k, const T* v, const bool* mask, const HeadView& s,
                                        int64_t begin, int64_t end, T* out) {
  std::vector<float> scores(static_cast<size_t>(s.keys));
  std::vector<float> query(static_cast<size_t>(s.dim)), acc(static_cast<size_t>(s.dim));
  const int64_t vec_end = s.dim - s.dim % kLanes;
  for (int64_t bh = begin; bh < end; ++bh) {
    const int64_t b = bh / s.heads, h = bh % s.heads, kb = b / s.rows_per_kv;
    const T* qh = q + b * s.q_stride_b + h * s.q_stride_h;
    for (int64_t j = 0; j < s.dim; ++j) query[j] = load_as_float(qh + j) * s.scale;
    const bool* mh = mask ? mask + kb * s.m_stride_b + h * s.m_stride_h : nullptr;
    // Keys [lo, hi) hold every allowed one: source padding masks a row's last keys, and in a
    // batch that rows joined, a row's first self-attention keys. Keys outside get weight
    // exp(-inf) = 0 and add nothing, so skipping them changes no bit (perf samples of this
    // kernel in `translate --dtype int8`, 1,000 lines: 213 -> 187).
    int64_t lo = 0, hi = s.keys;
    if (mh) {
      while (lo < s.keys && !mh[lo * s.m_stride_t]) ++lo;
      while (hi > lo && !mh[(hi - 1) * s.m_stride_t]) --hi;
      if (lo == hi) lo = 0, hi = s.keys;  // nothing allowed: every key, as unmasked (ATen's rows of a uniform average)
    }
    const bool any_allowed = mh == nullptr || lo > 0 || hi < s.keys || mh[lo * s.m_stride_t];
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t t = lo; t < hi; ++t) {
      if (any_allowed && mh && !mh[t * s.m_stride_t]) {
        scores[t] = -std::numeric_limits<float>::infinity();
        continue;
      }
      const T* kt = k + kb * s.k_stride_b + (h / s.group) * s.k_stride_h + t * s.k_stride_t;
      f32x16 lanes = splat(0.0f);
      for (int64_t j = 0; j < vec_end; j += kLanes) lanes += load16(query.data() + j) * load16_as_float(kt + j);
      float dot = tree_sum16(lanes);
      for (int64_t j = vec_end; j < s.dim; ++j) dot += query[j] * load_as_float(kt + j);
      scores[t] = dot;
      max = dot > max ? dot : max;
    }
    float total = 0.0f;
    for (int64_t t = lo; t < hi; ++t) total += scores[t] = std::exp(scores[t] - max);
    const float inv_total = 1.0f / total;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t t = lo; t < hi; ++t) {
      const float w = scores[t] * inv_total;
      if (w == 0.0f) continue;
      const T* vt = v + kb * s.v_stride_b + (h / s.group) * s.v_stride_h + t * s.v_stride_t;
      for (int64_t j = 0; j < vec_end; j += kLanes) store16(acc.data() + j, load16(acc.data() + j) + w * load16_as_float(vt + j));
      for (int64_t j = vec_end; j < s.dim; ++j) acc[j] += w * load_as_float(vt + j);
    }
    T* oh = out + (b * s.heads + h) * s.dim;  // [B, 1, H, d] = [B, 1, D]
    for (int64_t j = 0; j < s.dim; ++j) store_from_float(oh + j, acc[j]);
  }
}

TORCHMT_VECTOR_CLONES void attend_heads_fp32(const float* q, const float* k, const float* v, const bool* mask,
                                             const HeadView& s, int64_t begin, int64_t end, float* out) {
  attend_heads(q, k, v, mask, s, begin, end, out);
}

TORCHMT_VECTOR_CLONES void attend_heads_bf16(const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                             const bool* mask, const HeadView& s, int64_t begin, int64_t end,
                                             uint16_t* out) {
  attend_heads(q, k, v, mask, s, begin, end, out);
}

bool last_dim_contiguous(const at::Tensor& t) { return t.stride(-1) == 1 || t.size(-1) == 1; }

}  // namespace

at::Tensor try_single_query_attention_cpu(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                          const at::Tensor& mask_in) {
  if (at::GradMode::is_enabled() || !q_in.device().is_cpu() || q_in.dim() != 4 || q_in.size(2) != 1 ||
      k_in.dim() != 4 || v_in.dim() != 4)
    return {};
  const at::ScalarType dtype = q_in.scalar_type();
  if ((dtype != at::kFloat && dtype != at::kBFloat16) || k_in.scalar_type() != dtype || v_in.scalar_type() != dtype ||
      !k_in.device().is_cpu() || !v_in.device().is_cpu())
    return {};
  const int64_t batch = q_in.size(0), heads = q_in.size(1), dim = q_in.size(3), keys = k_in.size(2);
  const int64_t kv_heads = k_in.size(1), kv_batch = k_in.size(0);
  if (k_in.sizes() != v_in.sizes() || kv_batch == 0 || batch % kv_batch != 0 || kv_heads == 0 ||
      heads % kv_heads != 0 || k_in.size(3) != dim || keys == 0)
    return {};
  at::Tensor mask;
  if (mask_in.defined()) {
    if (mask_in.scalar_type() != at::kBool || !mask_in.device().is_cpu() || mask_in.dim() > 4) return {};
    const int64_t target[4] = {kv_batch, heads, 1, keys};  // right-aligned broadcast, one row per K/V row
    for (int64_t i = 0; i < mask_in.dim(); ++i) {
      const int64_t size = mask_in.size(mask_in.dim() - 1 - i);
      if (size != 1 && size != target[3 - i]) return {};
    }
    mask = mask_in.expand({kv_batch, heads, 1, keys});  // [B_kv, H, 1, Tk], strides 0 where broadcast
  }
  RECORD_FUNCTION("torchmt::single_query_attention", std::vector<c10::IValue>());
  const at::Tensor q = last_dim_contiguous(q_in) ? q_in : q_in.contiguous();
  const at::Tensor k = last_dim_contiguous(k_in) ? k_in : k_in.contiguous();
  const at::Tensor v = last_dim_contiguous(v_in) ? v_in : v_in.contiguous();

  HeadView s{};
  s.heads = heads;
  s.group = heads / kv_heads;
  s.rows_per_kv = batch / kv_batch;
  s.keys = keys;
  s.dim = dim;
  s.q_stride_b = q.stride(0);
  s.q_stride_h = q.stride(1);
  s.k_stride_b = k.stride(0);
  s.k_stride_h = k.stride(1);
  s.k_stride_t = k.stride(2);
  s.v_stride_b = v.stride(0);
  s.v_stride_h = v.stride(1);
  s.v_stride_t = v.stride(2);
  if (mask.defined()) {
    s.m_stride_b = mask.stride(0);
    s.m_stride_h = mask.stride(1);
    s.m_stride_t = mask.stride(3);
  }
  s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
  at::Tensor out = at::empty({batch, 1, heads * dim}, q.options());  // [B, 1, D]
  const bool* mp = mask.defined() ? mask.data_ptr<bool>() : nullptr;
  // Fork only when each thread gets ~64k multiply-adds.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / (2 * keys * dim));
  if (dtype == at::kFloat) {
    at::parallel_for(0, batch * heads, grain, [&](int64_t b0, int64_t b1) {
      attend_heads_fp32(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), mp, s, b0, b1,
                        out.data_ptr<float>());
    });
  } else {
    const auto bits = [](const at::Tensor& t) { return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>()); };
    at::parallel_for(0, batch * heads, grain, [&](int64_t b0, int64_t b1) {
      attend_heads_bf16(bits(q), bits(k), bits(v), mp, s, b0, b1,
                        reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>()));
    });
  }
  return out;
}

}  // namespace torchmt
