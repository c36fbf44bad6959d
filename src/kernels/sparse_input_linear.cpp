#include <algorithm>
#include <cstring>
#include <vector>

#include <ATen/record_function.h>
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#endif
#include <torch/torch.h>

#include "primitives.h"
#include "torchmt/util/device.h"
#include "vector.h"
#include "parallel.h"

namespace torchmt::kernels {
namespace {

// How far ahead (in nonzero inputs) the weight rows are prefetched: the rows a step reads are
// known from the list, scattered over a weight that does not stay in cache between steps.
constexpr int kPrefetchAhead = 4;

// Appends to idx[0, count) the indices of x's nonzero values from k to K, ascending; returns the
// new count. Branch-free: every index written, the nonzero ones kept.
TORCHMT_VECTOR_INLINE int64_t list_nonzero_inputs(const float* x, int64_t k, int64_t K, int32_t* idx, int64_t count) {
  for (; k < K; ++k) {
    idx[count] = static_cast<int32_t>(k);
    count += x[k] != 0.0f;  // a NaN is nonzero: it reaches the outputs as in a dense product
  }
  return count;
}

// out[n] = bias[n] + sum over the row's nonzero inputs k, ascending, of x[k] * wt[k, n]: one
// multiply-add per nonzero input and output, the output row (a few KB) kept in L1.
TORCHMT_VECTOR_INLINE void sparse_row(const float* x, const SparseInputWeights& w, int32_t* idx, float* out) {
  const int64_t N = w.out;
  const int64_t count = list_nonzero_inputs(x, 0, w.in, idx, 0);
  std::copy(w.bias.begin(), w.bias.end(), out);
  const float* wt = w.wt;
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

// Calls of more rows than that (x86 GCC builds): W^T then stays in cache from row to row, and each
// row's outputs are accumulated a block at a time in registers over its nonzero inputs: sixteen of
// AVX-512's 32 registers (256 outputs), eight of AVX2's 16 (64 outputs); a layer whose width is not
// a multiple of its block keeps the GEMM.
template <CpuIsa ISA>
constexpr int64_t kManyRowBlock = ISA >= CpuIsa::kAvx512 ? 256 : 64;
using RowKernel = void (*)(const float*, const SparseInputWeights&, int32_t*, float*);
template <CpuIsa ISA>
void sparse_row_many(const float* x, const SparseInputWeights& w, int32_t* idx, float* out);
#if TORCHMT_X86 && !defined(__clang__)
constexpr bool kManyRowKernel = true;

// The same sums as sparse_row (bias, then one multiply-add per nonzero input in ascending order),
// so a row's outputs do not depend on the number of rows in its call. V: the copy's register type.
template <typename V, int64_t kBlock>
TORCHMT_VECTOR_INLINE void sparse_row_blocked(const float* x, const SparseInputWeights& w, const int32_t* idx,
                                              int64_t count, float* out) {
  constexpr int64_t kWidth = sizeof(V) / sizeof(float);
  constexpr int kVecs = static_cast<int>(kBlock / kWidth);
  const int64_t N = w.out;
  const float* wt = w.wt;
  for (int64_t n0 = 0; n0 < N; n0 += kBlock) {
    V acc[kVecs];
#pragma GCC unroll 16
    for (int j = 0; j < kVecs; ++j) std::memcpy(&acc[j], w.bias.data() + n0 + kWidth * j, sizeof(V));
    for (int64_t i = 0; i < count; ++i) {
      if (i + kPrefetchAhead < count) {  // the rows are scattered: no hardware prefetcher finds them
        const char* ahead = reinterpret_cast<const char*>(wt + idx[i + kPrefetchAhead] * N + n0);
#pragma GCC unroll 16
        for (int line = 0; line < kBlock * static_cast<int>(sizeof(float)); line += 64)
          __builtin_prefetch(ahead + line, 0, 3);
      }
      const V xv = V{} + x[idx[i]];
      const float* row = wt + idx[i] * N + n0;
#pragma GCC unroll 16
      for (int j = 0; j < kVecs; ++j) {
        V wv;
        std::memcpy(&wv, row + kWidth * j, sizeof(V));
        acc[j] += xv * wv;
      }
    }
#pragma GCC unroll 16
    for (int j = 0; j < kVecs; ++j) std::memcpy(out + n0 + kWidth * j, &acc[j], sizeof(V));
  }
}

// The indices of x's nonzero values (a NaN is nonzero, as above), ascending, 16 inputs at a time
// compressed in a register (Zen 4's compress to memory is microcoded); returns their count. idx
// needs 16 entries to spare.
template <CpuIsa ISA>
int64_t nonzero_inputs(const float* x, int64_t K, int32_t* idx);

template <>
TORCHMT_TARGET_AVX512 int64_t nonzero_inputs<CpuIsa::kAvx512>(const float* x, int64_t K, int32_t* idx) {
  int64_t count = 0, k = 0;
  __m512i index = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (; k + 16 <= K; k += 16) {
    const __mmask16 nonzero = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + k), _mm512_setzero_ps(), _CMP_NEQ_UQ);
    _mm512_storeu_si512(idx + count, _mm512_maskz_compress_epi32(nonzero, index));
    count += __builtin_popcount(nonzero);
    index = _mm512_add_epi32(index, _mm512_set1_epi32(16));
  }
  return list_nonzero_inputs(x, k, K, idx, count);
}

// For each 8-bit mask, the positions of its set bits packed to the front, and their count: AVX2
// has no compress, so its nonzero list takes 8 inputs' indices from this table in one store.
struct LeftPackTable {
  int32_t lanes[256][8];
  int8_t count[256];
};
constexpr LeftPackTable make_left_pack_table() {
  LeftPackTable t{};
  for (int mask = 0; mask < 256; ++mask)
    for (int lane = 0; lane < 8; ++lane)
      if (mask >> lane & 1) t.lanes[mask][t.count[mask]++] = lane;
  return t;
}
alignas(64) constexpr LeftPackTable kLeftPack = make_left_pack_table();

// The same list as the AVX-512 variant's, 8 inputs at a time; idx needs 8 entries to spare.
template <>
TORCHMT_TARGET_AVX2 int64_t nonzero_inputs<CpuIsa::kAvx2>(const float* x, int64_t K, int32_t* idx) {
  int64_t count = 0, k = 0;
  for (; k + 8 <= K; k += 8) {
    const int nonzero = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + k), _mm256_setzero_ps(), _CMP_NEQ_UQ));
    const __m256i lanes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLeftPack.lanes[nonzero]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(idx + count),
                        _mm256_add_epi32(lanes, _mm256_set1_epi32(static_cast<int32_t>(k))));
    count += kLeftPack.count[nonzero];
  }
  return list_nonzero_inputs(x, k, K, idx, count);
}

template <>
TORCHMT_TARGET_AVX512 void sparse_row_many<CpuIsa::kAvx512>(const float* x, const SparseInputWeights& w, int32_t* idx,
                                                           float* out) {
  constexpr CpuIsa kLevel = CpuIsa::kAvx512;
  sparse_row_blocked<f32x16, kManyRowBlock<kLevel>>(x, w, idx, nonzero_inputs<kLevel>(x, w.in, idx), out);
}

template <>
TORCHMT_TARGET_AVX2 void sparse_row_many<CpuIsa::kAvx2>(const float* x, const SparseInputWeights& w, int32_t* idx,
                                                       float* out) {
  constexpr CpuIsa kLevel = CpuIsa::kAvx2;
  sparse_row_blocked<f32x8, kManyRowBlock<kLevel>>(x, w, idx, nonzero_inputs<kLevel>(x, w.in, idx), out);
}
#else
constexpr bool kManyRowKernel = false;
#endif

// The many-row variant for `isa` whose block divides the layer's width (AVX-512's, else AVX2's),
// or null: the GEMM (also below AVX2, and in clang builds).
RowKernel many_row_kernel(CpuIsa isa, int64_t out) {
  return isa_dispatch<CpuIsa::kAvx512, CpuIsa::kAvx2>(isa, [&](auto level) -> RowKernel {
    constexpr CpuIsa kLevel = decltype(level)::value;
    if constexpr (kLevel == CpuIsa::kPortable || !kManyRowKernel) {
      return nullptr;
    } else {
      if (out % kManyRowBlock<kLevel> == 0) return &sparse_row_many<kLevel>;
      if (out % kManyRowBlock<CpuIsa::kAvx2> == 0) return &sparse_row_many<CpuIsa::kAvx2>;
      return nullptr;
    }
  });
}

}  // namespace

std::shared_ptr<const SparseInputWeights> pack_sparse_input_weight(const at::Tensor& weight, const at::Tensor& bias) {
  TORCH_CHECK(weight.dim() == 2, "pack_sparse_input_weight: weight must be [out, in]");
  auto packed = std::make_shared<SparseInputWeights>();
  // clone: its own storage even where the weight already is a transposed view of one
  packed->transposed = weight.detach().to(torch::kCPU, torch::kFloat).t().clone(at::MemoryFormat::Contiguous);  // [in, out]
  packed->wt = packed->transposed.data_ptr<float>();
  packed->in = packed->transposed.size(0);
  packed->out = packed->transposed.size(1);
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
  if (M == 0) return {};
  RowKernel many_rows = nullptr;
  if (M > kSmallBatchLinearMaxRows) {
    many_rows = many_row_kernel(cpu_isa(), w.out);
    if (!many_rows) return {};
  }
  RECORD_FUNCTION("torchmt::sparse_input_linear", std::vector<c10::IValue>());
  const auto in = x.contiguous();
  auto out_shape = x.sizes().vec();
  out_shape.back() = w.out;
  auto y = torch::empty(out_shape, x.options());
  const float* xp = in.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  if (!many_rows) {
    std::vector<int32_t> idx(static_cast<size_t>(w.in));
    for (int64_t m = 0; m < M; ++m) sparse_rows(xp + m * w.in, w, idx.data(), yp + m * w.out);
    return y;
  }
  parallel_for(0, M, 16, [&](int64_t begin, int64_t end) {
    std::vector<int32_t> idx(static_cast<size_t>(w.in + 16));
    for (int64_t m = begin; m < end; ++m) many_rows(xp + m * w.in, w, idx.data(), yp + m * w.out);
  });
  return y;
}

}  // namespace torchmt::kernels
