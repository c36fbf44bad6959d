#include "torchmt/model/packed_linear.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <limits>

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

namespace torchmt {
namespace {

// MKL's CBLAS constants and its LP64 interface (MKL_INT = int), as LibTorch links it.
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112, kPacked = 151, kBMatrix = 162;
using PackGetSize = size_t (*)(int identifier, int m, int n, int k);
using Pack = void (*)(int layout, int identifier, int trans, int m, int n, int k, float alpha, const float* src,
                      int ld, float* dest);
using Compute = void (*)(int layout, int transa, int transb, int m, int n, int k, const float* a, int lda,
                         const float* b, int ldb, float beta, float* c, int ldc);

struct MklPackedApi {
  PackGetSize get_size = nullptr;
  Pack pack = nullptr;
  Compute compute = nullptr;
  bool ok() const { return get_size && pack && compute; }
};

const MklPackedApi& api() {
  static const MklPackedApi found = [] {
    MklPackedApi a;
    if (std::getenv("TORCHMT_NO_PACKED_GEMM")) return a;  // for A/B measurements
    a.get_size = reinterpret_cast<PackGetSize>(dlsym(RTLD_DEFAULT, "cblas_sgemm_pack_get_size"));
    a.pack = reinterpret_cast<Pack>(dlsym(RTLD_DEFAULT, "cblas_sgemm_pack"));
    a.compute = reinterpret_cast<Compute>(dlsym(RTLD_DEFAULT, "cblas_sgemm_compute"));
    return a;
  }();
  return found;
}

// The number of rows the weight is packed for: a hint to MKL's blocking, not a limit (any
// number of rows is computed against it).
constexpr int kPackRowsHint = 64;

}  // namespace

struct PackedLinearWeights {
  const void* data = nullptr;  // the weight it was packed from
  uint32_t version = 0;
  int64_t out_features = 0, in_features = 0;
  at::Tensor buffer;  // MKL's packed layout (bytes)
};

bool PackedWeightCache::available() { return api().ok(); }

at::Tensor PackedWeightCache::try_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                         int64_t min_rows) {
  if (!api().ok() || torch::GradMode::is_enabled() || !x.device().is_cpu() || x.scalar_type() != at::kFloat ||
      weight.scalar_type() != at::kFloat || !weight.is_contiguous() || weight.dim() != 2 ||
      at::autocast::is_autocast_enabled(at::kCPU))
    return {};
  const int64_t n = weight.size(0), k = weight.size(1);
  if (x.size(-1) != k || (bias.defined() && (bias.scalar_type() != at::kFloat || bias.numel() != n))) return {};
  const int64_t m = x.numel() / std::max<int64_t>(1, k);
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  if (m <= min_rows || m > kMaxInt || n > kMaxInt || k > kMaxInt) return {};

  auto packed = std::atomic_load(&packed_);
  const auto version = static_cast<uint32_t>(weight._version());
  if (!packed || packed->data != weight.data_ptr() || packed->version != version || packed->out_features != n ||
      packed->in_features != k) {
    auto fresh = std::make_shared<PackedLinearWeights>();
    fresh->data = weight.data_ptr();
    fresh->version = version;
    fresh->out_features = n;
    fresh->in_features = k;
    const size_t bytes = api().get_size(kBMatrix, kPackRowsHint, static_cast<int>(n), static_cast<int>(k));
    fresh->buffer = torch::empty({static_cast<int64_t>((bytes + sizeof(float) - 1) / sizeof(float))}, torch::kFloat);
    // B = W^T: W [N, K] row-major read transposed.
    api().pack(kRowMajor, kBMatrix, kTrans, kPackRowsHint, static_cast<int>(n), static_cast<int>(k), 1.0f,
               weight.data_ptr<float>(), static_cast<int>(k), fresh->buffer.data_ptr<float>());
    packed = fresh;
    std::atomic_store(&packed_, packed);
  }
  auto input = x.reshape({m, k}).contiguous();  // [M, K]
  auto out_shape = x.sizes().vec();
  out_shape.back() = n;
  at::Tensor y;
  float beta = 0.0f;
  if (bias.defined()) {
    y = bias.reshape({1, n}).expand({m, n}).contiguous();  // [M, N]: C = x W^T + C
    beta = 1.0f;
  } else {
    y = torch::empty({m, n}, x.options());
  }
  api().compute(kRowMajor, kNoTrans, kPacked, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
                input.data_ptr<float>(), static_cast<int>(k), packed->buffer.data_ptr<float>(), static_cast<int>(k),
                beta, y.data_ptr<float>(), static_cast<int>(n));
  return y.view(out_shape);
}

}  // namespace torchmt
