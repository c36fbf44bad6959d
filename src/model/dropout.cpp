#include "torchmt/model/dropout.h"

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <type_traits>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include "../util/cpu_vector_kernels.h"

namespace torchmt {
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
TORCHMT_VECTOR_CLONES
void mask_range_f32(const float* in, float* out, int64_t begin, int64_t end, MaskParams m) {
  for (int64_t i = begin; i < end; ++i)
    out[i] = in[i] * (keep(static_cast<uint64_t>(i), m.seed, m.threshold) ? m.scale : 0.0f);
}

TORCHMT_VECTOR_CLONES
void mask_range_bf16(const uint16_t* in, uint16_t* out, int64_t begin, int64_t end, MaskParams m) {
  using namespace cpu_kernels;
  for (int64_t i = begin; i < end; ++i)
    out[i] = float_to_bf16(bf16_to_float(in[i]) *
                           (keep(static_cast<uint64_t>(i), m.seed, m.threshold) ? m.scale : 0.0f));
}

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

at::Tensor masked_copy(const at::Tensor& x, double p, uint64_t seed) {
  RECORD_FUNCTION("torchmt::hashed_dropout", std::vector<c10::IValue>{});
  auto in = x.contiguous();
  auto out = at::empty_like(in, at::MemoryFormat::Contiguous);
  const double scaled = p * 4294967296.0;
  const MaskParams params{seed, static_cast<uint32_t>(std::min(scaled, 4294967295.0)),
                          static_cast<float>(1.0 / (1.0 - p))};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, in.scalar_type(), "hashed_dropout", [&] {
    const scalar_t* src = in.data_ptr<scalar_t>();
    scalar_t* dst = out.data_ptr<scalar_t>();
    at::parallel_for(0, in.numel(), 32768, [&](int64_t begin, int64_t end) { mask_range(src, dst, begin, end, params); });
  });
  return out;
}

class HashedDropoutFunction : public torch::autograd::Function<HashedDropoutFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, double p, int64_t seed) {
    ctx->saved_data["p"] = p;
    ctx->saved_data["seed"] = seed;
    return masked_copy(x, p, static_cast<uint64_t>(seed));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const double p = ctx->saved_data["p"].toDouble();
    const auto seed = static_cast<uint64_t>(ctx->saved_data["seed"].toInt());
    return {masked_copy(grads[0], p, seed), at::Tensor(), at::Tensor()};
  }
};

uint64_t draw_seed() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get<at::CPUGeneratorImpl>()->random64();
}

}  // namespace

torch::Tensor hashed_dropout(const torch::Tensor& x, double p, uint64_t seed) {
  if (!x.device().is_cpu()) throw std::invalid_argument("hashed_dropout runs on CPU tensors");
  if (p <= 0.0) return x;
  if (p >= 1.0) return x * 0;
  return HashedDropoutFunction::apply(x, p, static_cast<int64_t>(seed));
}

DropoutImpl::DropoutImpl(double p_) : p(p_) {
  if (p < 0.0 || p > 1.0) throw std::invalid_argument("dropout probability must be in [0, 1]");
}

torch::Tensor DropoutImpl::forward(const torch::Tensor& x) {
  if (!is_training() || p == 0.0) return x;
  if (!x.device().is_cpu()) return torch::dropout(x, p, /*train=*/true);
  return hashed_dropout(x, p, draw_seed());
}

}  // namespace torchmt
