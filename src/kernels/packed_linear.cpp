#include <dlfcn.h>

#include <cstring>
#include <limits>
#include <optional>

#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/torch.h>

#include "primitives.h"

namespace torchmt::kernels {
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

const MklPackedApi& mkl() {
  static const MklPackedApi found = [] {
    MklPackedApi a;
    a.get_size = reinterpret_cast<PackGetSize>(dlsym(RTLD_DEFAULT, "cblas_sgemm_pack_get_size"));
    a.pack = reinterpret_cast<Pack>(dlsym(RTLD_DEFAULT, "cblas_sgemm_pack"));
    a.compute = reinterpret_cast<Compute>(dlsym(RTLD_DEFAULT, "cblas_sgemm_compute"));
    return a;
  }();
  return found;
}

// LibTorch's oneDNN linear operators (registered where LibTorch was built with oneDNN), called
// boxed so that no schema's C++ signature is compiled in.
struct OnednnOps {
  std::optional<c10::OperatorHandle> reorder, linear;
  bool ok() const { return reorder && linear; }
};

const OnednnOps& onednn() {
  static const OnednnOps found = [] {
    OnednnOps ops;
    if (!at::hasMKLDNN()) return ops;
    auto& dispatcher = c10::Dispatcher::singleton();
    ops.reorder = dispatcher.findSchema({"mkldnn::_reorder_linear_weight", ""});
    ops.linear = dispatcher.findSchema({"mkldnn::_linear_pointwise", ""});
    // The schemas the calls below are built for (LibTorch 2.x): anything else is not used.
    if (ops.reorder && ops.reorder->schema().arguments().size() != 2) ops.reorder.reset();
    if (ops.linear && ops.linear->schema().arguments().size() != 6) ops.linear.reset();
    return ops;
  }();
  return found;
}

// The number of rows the weight is packed for: a hint to the libraries' blocking, not a limit
// (any number of rows is computed against it).
constexpr int kPackRowsHint = 64;

bool gemm_available(PackedGemm g) {
  return g == PackedGemm::kAten || (g == PackedGemm::kMkl && mkl().ok()) || (g == PackedGemm::kOnednn && onednn().ok());
}

// The rule table: which packed GEMM serves an fp32 weight [out, in], by instruction set, as
// measured (tools/bench/DECISIONS.md, "packed GEMM rules"): the first row whose instruction set
// is at most the active one and whose shape bounds hold wins.
struct GemmRule {
  CpuIsa min_isa;
  int64_t min_out, min_in;  // the rule applies to weights at least this large
  PackedGemm gemm;
};
constexpr GemmRule kGemmRules[] = {
    // oneDNN's JIT uses AVX-512 where MKL takes a generic path on AMD's AVX-512 cores ([64 x 256] x
    // [256 x 8000]: 3.05 vs 5.18 ms, 1 thread, AVX512-BF16 EPYC); below the vocabulary projection
    // ATen is as fast in whole runs, without oneDNN's per-shape primitives and packed copies
    // (modern-small fp32: 282 vs 411 MiB peak).
    {CpuIsa::kAvx512, 4096, 0, PackedGemm::kOnednn},
    {CpuIsa::kAvx512, 0, 0, PackedGemm::kAten},
    // AVX2 (Zen 3): ATen ran as fast in whole runs of modern-small and modern-base (vocabularies
    // of 8,000 and 16,000 included), without 30-200 MB of packed copies (DECISIONS.md); oneDNN
    // only for very large vocabularies (bench_gemm, [64 x 512] x [512 x 58101]: 40.8 vs 103.0 ms).
    {CpuIsa::kAvx2, 32768, 0, PackedGemm::kOnednn},
    {CpuIsa::kAvx2, 0, 0, PackedGemm::kAten},
    {CpuIsa::kPortable, 0, 0, PackedGemm::kMkl},
};

// x [M, K] -> [M, N]; undefined for kAten.
at::Tensor run(const PackedWeights& p, const at::Tensor& x, const at::Tensor& bias) {
  const int64_t m = x.size(0), n = p.out, k = p.in;
  if (p.gemm == PackedGemm::kOnednn) {
    torch::jit::Stack stack{x, p.buffer, bias.defined() ? c10::IValue(bias) : c10::IValue(), c10::IValue("none"),
                            c10::IValue(c10::List<std::optional<at::Scalar>>()), c10::IValue()};
    onednn().linear->callBoxed(&stack);
    return stack.at(0).toTensor();
  }
  if (p.gemm != PackedGemm::kMkl) return {};
  at::Tensor y;
  float beta = 0.0f;
  if (bias.defined()) {
    // C = x W^T + C with C = the bias in every row, copied row by row: a little faster than
    // expand().contiguous()'s strided copy, the same values (adding the bias after a beta = 0
    // call instead changes the last bits where K = 1024).
    y = torch::empty({m, n}, x.options());  // [M, N]
    const float* b = bias.data_ptr<float>();
    float* out = y.data_ptr<float>();
    for (int64_t i = 0; i < m; ++i) std::memcpy(out + i * n, b, static_cast<size_t>(n) * sizeof(float));
    beta = 1.0f;
  } else {
    y = torch::empty({m, n}, x.options());
  }
  mkl().compute(kRowMajor, kNoTrans, kPacked, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
                x.data_ptr<float>(), static_cast<int>(k), p.buffer.data_ptr<float>(), static_cast<int>(k), beta,
                y.data_ptr<float>(), static_cast<int>(n));
  return y;
}

}  // namespace

const char* packed_gemm_name(PackedGemm gemm) {
  switch (gemm) {
    case PackedGemm::kMkl: return "mkl";
    case PackedGemm::kOnednn: return "onednn";
    default: return "aten";
  }
}

std::vector<PackedGemm> available_packed_gemms() {
  std::vector<PackedGemm> out;
  if (mkl().ok()) out.push_back(PackedGemm::kMkl);
  if (onednn().ok()) out.push_back(PackedGemm::kOnednn);
  return out;
}

PackedGemm packed_gemm_for(int64_t out, int64_t in) {
  if (const int forced = kernel_settings().packed_gemm; forced >= 0)  // TORCHMT_PACKED_GEMM, or a Runtime's
    return gemm_available(static_cast<PackedGemm>(forced)) ? static_cast<PackedGemm>(forced) : PackedGemm::kAten;
  const CpuIsa isa = cpu_isa();
  for (const GemmRule& rule : kGemmRules)
    if (isa >= rule.min_isa && out >= rule.min_out && in >= rule.min_in)
      return gemm_available(rule.gemm) ? rule.gemm : PackedGemm::kAten;
  return PackedGemm::kAten;
}

PackedWeights pack_weight(const at::Tensor& weight, PackedGemm gemm) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kFloat && weight.device().is_cpu(),
              "pack_weight: expected an fp32 CPU weight [out, in]");
  PackedWeights p;
  p.out = weight.size(0);
  p.in = weight.size(1);
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  if (!gemm_available(gemm) || p.out > kMaxInt || p.in > kMaxInt) return p;  // kAten
  p.gemm = gemm;
  const at::Tensor w = weight.contiguous();
  const int n = static_cast<int>(p.out), k = static_cast<int>(p.in);
  if (gemm == PackedGemm::kMkl) {
    const size_t bytes = mkl().get_size(kBMatrix, kPackRowsHint, n, k);
    p.buffer = torch::empty({static_cast<int64_t>((bytes + sizeof(float) - 1) / sizeof(float))}, torch::kFloat);
    // B = W^T: W [N, K] row-major read transposed.
    mkl().pack(kRowMajor, kBMatrix, kTrans, kPackRowsHint, n, k, 1.0f, w.data_ptr<float>(), k,
               p.buffer.data_ptr<float>());
  } else if (gemm == PackedGemm::kOnednn) {
    torch::jit::Stack stack{w, c10::IValue(int64_t{kPackRowsHint})};
    onednn().reorder->callBoxed(&stack);
    p.buffer = stack.at(0).toTensor();
  }
  return p;
}

bool packed_gemm_serves(PackedGemm gemm, const at::Tensor& x) {
  if (gemm == PackedGemm::kAten || torch::GradMode::is_enabled() || !x.device().is_cpu() ||
      x.scalar_type() != at::kFloat || at::autocast::is_autocast_enabled(at::kCPU) || x.dim() < 1 ||
      x.size(-1) == 0)
    return false;
  const int64_t m = x.numel() / x.size(-1);
  return m > kSmallBatchLinearMaxRows && m <= std::numeric_limits<int>::max();
}

at::Tensor try_packed_linear(const PackedWeights& packed, const at::Tensor& x, const at::Tensor& bias) {
  const int64_t n = packed.out, k = packed.in;
  if (!packed_gemm_serves(packed.gemm, x) || x.size(-1) != k ||
      (bias.defined() && (bias.scalar_type() != at::kFloat || bias.numel() != n)))
    return {};
  const int64_t m = x.numel() / k;
  auto input = x.reshape({m, k}).contiguous();  // [M, K]
  auto y = run(packed, input, bias.defined() ? bias.contiguous() : bias);  // [M, N]
  if (!y.defined()) return {};
  auto out_shape = x.sizes().vec();
  out_shape.back() = n;
  return y.view(out_shape);
}

}  // namespace torchmt::kernels
