#include "torchmt/model/packed_linear.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>

#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/torch.h>

#include "torchmt/util/environment.h"
#include "torchmt/util/probe_cache.h"

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

bool packing_disabled() { return env_flag("TORCHMT_NO_PACKED_GEMM", false); }  // for A/B measurements

const MklPackedApi& mkl() {
  static const MklPackedApi found = [] {
    MklPackedApi a;
    if (packing_disabled()) return a;
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
    if (packing_disabled() || !at::hasMKLDNN()) return ops;
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

std::mutex choice_mutex;  // guards the two below and serialises probes
std::optional<PackedGemm> forced;
std::map<std::pair<int64_t, int64_t>, PackedGemm> chosen;  // [in, out] -> GEMM, this process

std::optional<PackedGemm> forced_by_environment() {
  const auto v = env_value("TORCHMT_PACKED_GEMM");
  if (!v) return std::nullopt;
  for (PackedGemm g : {PackedGemm::kAten, PackedGemm::kMkl, PackedGemm::kOnednn})
    if (*v == packed_gemm_name(g)) return g;
  return std::nullopt;
}

bool gemm_available(PackedGemm g) {
  return g == PackedGemm::kAten || (g == PackedGemm::kMkl && mkl().ok()) || (g == PackedGemm::kOnednn && onednn().ok());
}

}  // namespace

struct PackedLinearWeights {
  const void* data = nullptr;  // the weight it was packed from
  uint32_t version = 0;
  int64_t out_features = 0, in_features = 0;
  PackedGemm gemm = PackedGemm::kAten;
  at::Tensor buffer;  // MKL's packed layout (bytes) or oneDNN's blocked weight
};

namespace {

std::shared_ptr<PackedLinearWeights> pack(const at::Tensor& weight, PackedGemm gemm) {
  auto p = std::make_shared<PackedLinearWeights>();
  p->data = weight.data_ptr();
  p->version = static_cast<uint32_t>(weight._version());
  p->out_features = weight.size(0);
  p->in_features = weight.size(1);
  p->gemm = gemm;
  const int n = static_cast<int>(p->out_features), k = static_cast<int>(p->in_features);
  if (gemm == PackedGemm::kMkl) {
    const size_t bytes = mkl().get_size(kBMatrix, kPackRowsHint, n, k);
    p->buffer = torch::empty({static_cast<int64_t>((bytes + sizeof(float) - 1) / sizeof(float))}, torch::kFloat);
    // B = W^T: W [N, K] row-major read transposed.
    mkl().pack(kRowMajor, kBMatrix, kTrans, kPackRowsHint, n, k, 1.0f, weight.data_ptr<float>(), k,
               p->buffer.data_ptr<float>());
  } else if (gemm == PackedGemm::kOnednn) {
    torch::jit::Stack stack{weight, c10::IValue(int64_t{kPackRowsHint})};
    onednn().reorder->callBoxed(&stack);
    p->buffer = stack.at(0).toTensor();
  }
  return p;
}

// x [M, K] -> [M, N]; undefined for kAten.
at::Tensor run(const PackedLinearWeights& p, const at::Tensor& x, const at::Tensor& bias) {
  const int64_t m = x.size(0), n = p.out_features, k = p.in_features;
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

// The GEMM for this weight's shape: forced, chosen earlier in this process or on this machine,
// or measured now on this call (three runs each, the fastest run counts).
PackedGemm choose(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  std::lock_guard<std::mutex> lock(choice_mutex);
  static const std::optional<PackedGemm> from_environment = forced_by_environment();
  if (forced) return gemm_available(*forced) ? *forced : PackedGemm::kAten;
  if (from_environment) return gemm_available(*from_environment) ? *from_environment : PackedGemm::kAten;
  const std::pair<int64_t, int64_t> shape{weight.size(1), weight.size(0)};
  if (auto it = chosen.find(shape); it != chosen.end()) return it->second;

  const std::string key = ProbeCache::machine_key(at::get_num_threads()) + "|linear " +
                          std::to_string(shape.first) + "x" + std::to_string(shape.second);
  const ProbeCache cache("gemm-probe.tsv");
  PackedGemm best = PackedGemm::kAten;
  bool known = false;
  if (auto hit = cache.get(key)) {
    for (PackedGemm g : PackedWeightCache::available_gemms())
      if (hit->value == packed_gemm_name(g)) best = g, known = true;
    if (hit->value == packed_gemm_name(PackedGemm::kAten)) known = true;
  }
  if (!known) {
    std::string note;
    double best_us = std::numeric_limits<double>::infinity();
    std::vector<PackedGemm> candidates{PackedGemm::kAten};
    for (PackedGemm g : PackedWeightCache::available_gemms()) candidates.push_back(g);
    for (PackedGemm g : candidates) {
      auto p = pack(weight, g);
      double fastest = std::numeric_limits<double>::infinity();
      for (int r = 0; r < 3; ++r) {
        const auto start = std::chrono::steady_clock::now();
        at::Tensor y = g == PackedGemm::kAten ? at::linear(x, weight, bias) : run(*p, x, bias);
        fastest = std::min(fastest, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
      }
      char part[64];
      std::snprintf(part, sizeof(part), "%s%s %.0f us", note.empty() ? "" : ", ", packed_gemm_name(g).c_str(), fastest);
      note += part;
      if (fastest < best_us) best_us = fastest, best = g;
    }
    note += " at " + std::to_string(x.size(0)) + " rows";
    cache.put(key, {packed_gemm_name(best), note});
  }
  chosen[shape] = best;
  return best;
}

}  // namespace

std::string packed_gemm_name(PackedGemm gemm) {
  switch (gemm) {
    case PackedGemm::kMkl: return "mkl";
    case PackedGemm::kOnednn: return "onednn";
    default: return "aten";
  }
}

std::vector<PackedGemm> PackedWeightCache::available_gemms() {
  std::vector<PackedGemm> out;
  if (mkl().ok()) out.push_back(PackedGemm::kMkl);
  if (onednn().ok()) out.push_back(PackedGemm::kOnednn);
  return out;
}

bool PackedWeightCache::available() { return mkl().ok() || onednn().ok(); }  // per call: no vector

void PackedWeightCache::force_gemm(std::optional<PackedGemm> gemm) {
  std::lock_guard<std::mutex> lock(choice_mutex);
  forced = gemm;
}

at::Tensor PackedWeightCache::try_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                         int64_t min_rows) {
  if (!available() || torch::GradMode::is_enabled() || !x.device().is_cpu() || x.scalar_type() != at::kFloat ||
      weight.scalar_type() != at::kFloat || weight.is_mkldnn() || !weight.is_contiguous() || weight.dim() != 2 ||
      at::autocast::is_autocast_enabled(at::kCPU))
    return {};
  const int64_t n = weight.size(0), k = weight.size(1);
  if (x.size(-1) != k || (bias.defined() && (bias.scalar_type() != at::kFloat || bias.numel() != n))) return {};
  const int64_t m = x.numel() / std::max<int64_t>(1, k);
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  if (m <= min_rows || m > kMaxInt || n > kMaxInt || k > kMaxInt) return {};

  auto input = x.reshape({m, k}).contiguous();  // [M, K]
  const at::Tensor b = bias.defined() ? bias.contiguous() : bias;
  auto packed = std::atomic_load(&packed_);
  const auto version = static_cast<uint32_t>(weight._version());
  if (!packed || packed->data != weight.data_ptr() || packed->version != version || packed->out_features != n ||
      packed->in_features != k) {
    packed = pack(weight, choose(input, weight, b));
    std::atomic_store(&packed_, packed);
  }
  auto y = run(*packed, input, b);  // [M, N]
  if (!y.defined()) return {};
  auto out_shape = x.sizes().vec();
  out_shape.back() = n;
  return y.view(out_shape);
}

}  // namespace torchmt
