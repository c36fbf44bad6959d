#include <algorithm>
#include <type_traits>

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include "primitives.h"
#include "vector.h"
#include "parallel.h"

namespace torchmt::kernels {
namespace {

// Keep decision of element `index`: a 32-bit multiply-xorshift hash of the absolute index
// keyed by the 64-bit seed, compared with p * 2^32. It depends only on (seed, index), so
// forward and backward agree and any split of the range over threads gives the same mask.
TORCHMT_VECTOR_INLINE bool keep(uint64_t index, uint64_t seed, uint32_t threshold) {
  uint32_t x = static_cast<uint32_t>(index) * 0x9E3779B9u ^ static_cast<uint32_t>(seed) ^
               static_cast<uint32_t>(index >> 32) * 0x85EBCA6Bu;
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x ^= static_cast<uint32_t>(seed >> 32);
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x >= threshold;
}

struct MaskParams {
  uint64_t seed;
  uint32_t threshold;  // p * 2^32
  float scale;         // 1 / (1 - p)
};

// out[i] = in[i] * (keep(i) ? scale : 0) for i in [begin, end), in fp32 arithmetic.
TORCHMT_VECTOR_INLINE void mask_range_f32_body(const float* in, float* out, int64_t begin, int64_t end, MaskParams m) {
  for (int64_t i = begin; i < end; ++i)
    out[i] = in[i] * (keep(static_cast<uint64_t>(i), m.seed, m.threshold) ? m.scale : 0.0f);
}

TORCHMT_VECTOR_INLINE void mask_range_bf16_body(const uint16_t* in, uint16_t* out, int64_t begin, int64_t end,
                                                MaskParams m) {
  for (int64_t i = begin; i < end; ++i)
    out[i] = float_to_bf16(bf16_to_float(in[i]) *
                           (keep(static_cast<uint64_t>(i), m.seed, m.threshold) ? m.scale : 0.0f));
}

TORCHMT_VECTOR_KERNEL(void, mask_range_f32, mask_range_f32_body, (const float* in, float* out, int64_t begin, int64_t end, MaskParams m),
                      (in, out, begin, end, m))
TORCHMT_VECTOR_KERNEL(void, mask_range_bf16, mask_range_bf16_body,
                      (const uint16_t* in, uint16_t* out, int64_t begin, int64_t end, MaskParams m),
                      (in, out, begin, end, m))

template <typename scalar_t>
void mask_range_generic(const scalar_t* in, scalar_t* out, int64_t begin, int64_t end, MaskParams m) {
  for (int64_t i = begin; i < end; ++i)
    out[i] = static_cast<scalar_t>(static_cast<float>(in[i]) *
                                   (keep(static_cast<uint64_t>(i), m.seed, m.threshold) ? m.scale : 0.0f));
}

template <typename scalar_t>
void mask_range(const scalar_t* in, scalar_t* out, int64_t begin, int64_t end, MaskParams m) {
  if constexpr (std::is_same_v<scalar_t, float>) {
    mask_range_f32(in, out, begin, end, m);
  } else if constexpr (std::is_same_v<scalar_t, c10::BFloat16>) {
    mask_range_bf16(reinterpret_cast<const uint16_t*>(in), reinterpret_cast<uint16_t*>(out), begin, end, m);
  } else {
    mask_range_generic(in, out, begin, end, m);
  }
}

}  // namespace

at::Tensor hashed_dropout_mask(const at::Tensor& x, double p, uint64_t seed) {
  RECORD_FUNCTION("torchmt::hashed_dropout", std::vector<c10::IValue>{});
  auto in = x.contiguous();
  auto out = at::empty_like(in, at::MemoryFormat::Contiguous);
  const double scaled = p * 4294967296.0;
  const MaskParams params{seed, static_cast<uint32_t>(std::min(scaled, 4294967295.0)),
                          static_cast<float>(1.0 / (1.0 - p))};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, in.scalar_type(), "hashed_dropout", [&] {
    const scalar_t* src = in.data_ptr<scalar_t>();
    scalar_t* dst = out.data_ptr<scalar_t>();
    parallel_for(0, in.numel(), 32768, [&](int64_t begin, int64_t end) { mask_range(src, dst, begin, end, params); });
  });
  return out;
}

}  // namespace torchmt::kernels
