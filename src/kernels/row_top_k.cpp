#include "primitives.h"
#include "parallel.h"

#include <cmath>
#include <limits>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace torchmt::kernels {
namespace {

// A row's best k so far, sorted best first (ties: the earlier index first, as it came first).
struct BestK {
  float* value;
  int64_t* index;
  int64_t k;
  int64_t filled = 0;

  float threshold() const { return filled < k ? -std::numeric_limits<float>::infinity() : value[k - 1]; }
  // `v` beats the k-th best (or the list is not full): it takes its place in order.
  void insert(float v, int64_t i) {
    int64_t pos = filled < k ? filled++ : k - 1;
    while (pos > 0 && value[pos - 1] < v) {
      value[pos] = value[pos - 1];
      index[pos] = index[pos - 1];
      --pos;
    }
    value[pos] = v;
    index[pos] = i;
  }
};

// Entries [from, n) of a row into `best` (the first k are in already), but those `blocked`
// marks (null: none).
template <CpuIsa ISA>
void scan(const float* x, const bool* blocked, int64_t from, int64_t n, BestK& best);

template <>
void scan<CpuIsa::kPortable>(const float* x, const bool* blocked, int64_t from, int64_t n, BestK& best) {
  float threshold = best.threshold();
  for (int64_t j = from; j < n; ++j)
    if (x[j] > threshold && !(blocked && blocked[j])) {  // false for NaN; an equal value comes later, so it stays out
      best.insert(x[j], j);
      threshold = best.threshold();
    }
}

#if TORCHMT_X86
template <>
TORCHMT_TARGET_AVX512 void scan<CpuIsa::kAvx512>(const float* x, const bool* blocked, int64_t from, int64_t n,
                                                BestK& best) {
  float threshold = best.threshold();
  int64_t j = from;
  for (; j + 16 <= n; j += 16) {
    __mmask16 above = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + j), _mm512_set1_ps(threshold), _CMP_GT_OQ);
    if (blocked && above) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocked + j));  // 16 bools
      above = static_cast<__mmask16>(above & ~_mm_test_epi8_mask(b, b));
    }
    while (above) {
      const int64_t at = j + __builtin_ctz(above);
      above = static_cast<__mmask16>(above & (above - 1));
      if (x[at] > threshold) {  // the threshold may have risen within these 16
        best.insert(x[at], at);
        threshold = best.threshold();
      }
    }
  }
  scan<CpuIsa::kPortable>(x, blocked, j, n, best);
}

// The same scan 8 lanes at a time, for CPUs without AVX-512 (the portable scan's branch per
// entry was the CPU's, not the vector unit's, work).
template <>
TORCHMT_TARGET_AVX2 void scan<CpuIsa::kAvx2>(const float* x, const bool* blocked, int64_t from, int64_t n,
                                            BestK& best) {
  float threshold = best.threshold();
  int64_t j = from;
  for (; j + 8 <= n; j += 8) {
    unsigned above = static_cast<unsigned>(
        _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + j), _mm256_set1_ps(threshold), _CMP_GT_OQ)));
    if (blocked && above) {  // 8 bools; a zero byte is an open entry
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blocked + j));
      above &= static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(b, _mm_setzero_si128()))) & 0xffu;
    }
    while (above) {
      const int64_t at = j + __builtin_ctz(above);
      above &= above - 1;
      if (x[at] > threshold) {  // the threshold may have risen within these 8
        best.insert(x[at], at);
        threshold = best.threshold();
      }
    }
  }
  scan<CpuIsa::kPortable>(x, blocked, j, n, best);
}

#endif

using Scan = void (*)(const float*, const bool*, int64_t, int64_t, BestK&);

}  // namespace

void row_top_k(const float* x, int64_t rows, int64_t n, int64_t k, float* values, int64_t* indices,
               const bool* blocked) {
  TORCH_CHECK(k >= 1 && k <= n, "row_top_k: k must be in [1, ", n, "], got ", k);
  const Scan scan_rest =
      isa_dispatch<CpuIsa::kAvx512, CpuIsa::kAvx2>(cpu_isa(), [](auto level) -> Scan { return &scan<level>; });
  parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = x + r * n;
      const bool* row_blocked = blocked ? blocked + r * n : nullptr;
      BestK best{values + r * k, indices + r * k, k};
      for (int64_t j = 0; j < k; ++j)
        best.insert(std::isnan(row[j]) || (row_blocked && row_blocked[j]) ? -std::numeric_limits<float>::infinity()
                                                                          : row[j],
                    j);
      scan_rest(row, row_blocked, k, n, best);
    }
  });
}

std::pair<at::Tensor, at::Tensor> row_top_k(const at::Tensor& x, int64_t k, const at::Tensor& blocked) {
  TORCH_CHECK(x.dim() == 2, "row_top_k: expected [rows, n]");
  TORCH_CHECK(!blocked.defined() || (blocked.sizes() == x.sizes() && blocked.scalar_type() == torch::kBool),
              "row_top_k: blocked must be bool of the input's shape");
  if (!x.device().is_cpu() || x.scalar_type() != torch::kFloat) {
    const auto open = blocked.defined() ? x.masked_fill(blocked, -std::numeric_limits<double>::infinity()) : x;
    auto [values, indices] = k == 1 ? open.max(-1, /*keepdim=*/true) : open.topk(k, -1);
    return {values, indices};
  }
  auto input = x.contiguous();
  const auto mask = blocked.defined() ? blocked.to(torch::kCPU).contiguous() : at::Tensor();
  auto values = torch::empty({x.size(0), k}, input.options());                   // [rows, k]
  auto indices = torch::empty({x.size(0), k}, input.options().dtype(torch::kLong));  // [rows, k]
  row_top_k(input.data_ptr<float>(), x.size(0), x.size(1), k, values.data_ptr<float>(), indices.data_ptr<int64_t>(),
            mask.defined() ? mask.data_ptr<bool>() : nullptr);
  return {values, indices};
}

}  // namespace torchmt::kernels
