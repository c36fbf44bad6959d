#include "torchmt/kernels/runtime.h"

#include "util/thread_team.h"

#include <stdexcept>

#include "cpu_isa.h"
#include "primitives.h"
#include "util/environment.h"

namespace torchmt {

namespace {

kernels::CpuIsa parse_isa(const std::string& name, const std::string& what) {
  return name.empty() ? kernels::detected_cpu_isa() : kernels::cpu_isa_by_name(name, what);
}

int parse_gemm(const std::string& name, const std::string& what) {
  if (name.empty()) return -1;
  for (auto g : {kernels::PackedGemm::kAten, kernels::PackedGemm::kMkl, kernels::PackedGemm::kOnednn})
    if (name == kernels::packed_gemm_name(g)) return static_cast<int>(g);
  throw std::invalid_argument(what + "=" + name + ": expected aten|mkl|onednn");
}

kernels::KernelSettings settings_of(const Runtime& r, const char* isa_what, const char* gemm_what) {
  kernels::KernelSettings s;
  s.isa = parse_isa(r.cpu_isa, isa_what);
  s.packed_gemm = parse_gemm(r.packed_gemm, gemm_what);
  s.screened_argmax = r.screened_argmax;
  s.screened_beam = r.screened_beam;
  s.sparse_input = r.sparse_input;
  return s;
}

}  // namespace

Runtime Runtime::from_environment() {
  Runtime r;
  r.cpu_isa = env_value("TORCHMT_CPU_ISA").value_or("");
  r.packed_gemm = env_value("TORCHMT_PACKED_GEMM").value_or("");
  r.screened_argmax = env_flag("TORCHMT_SCREENED_ARGMAX", true);
  r.screened_beam = env_flag("TORCHMT_SCREENED_BEAM", true);
  r.sparse_input = env_flag("TORCHMT_SPARSE_INPUT", true);
  settings_of(r, "TORCHMT_CPU_ISA", "TORCHMT_PACKED_GEMM");  // names the variable on a bad value
  return r;
}

void Runtime::validate() const {
  settings_of(*this, "cpu_isa", "packed_gemm");
  if (inter_threads < 0 || intra_threads < 0)
    throw std::invalid_argument("inter_threads=" + std::to_string(inter_threads) + ", intra_threads=" +
                                std::to_string(intra_threads) + ": thread counts cannot be negative");
  if (inter_threads > kMaxThreads || intra_threads > kMaxThreads)
    throw std::invalid_argument("inter_threads=" + std::to_string(inter_threads) + ", intra_threads=" +
                                std::to_string(intra_threads) + ": at most " + std::to_string(kMaxThreads) + " each");
  if (intra_threads > 0 && inter_threads == 0)
    throw std::invalid_argument("intra_threads=" + std::to_string(intra_threads) +
                                " needs inter_threads >= 1 (the threads inside each of the translator's workers)");
}

bool Runtime::operator==(const Runtime& o) const {
  return cpu_isa == o.cpu_isa && packed_gemm == o.packed_gemm && screened_argmax == o.screened_argmax &&
         screened_beam == o.screened_beam && sparse_input == o.sparse_input && inter_threads == o.inter_threads &&
         intra_threads == o.intra_threads;
}

RuntimeScope::RuntimeScope(const Runtime& runtime)
    : settings_(std::make_shared<const kernels::KernelSettings>(settings_of(runtime, "cpu_isa", "packed_gemm"))),
      previous_(kernels::thread_kernel_settings()) {
  kernels::set_thread_kernel_settings(static_cast<const kernels::KernelSettings*>(settings_.get()));
}

RuntimeScope::~RuntimeScope() {
  kernels::set_thread_kernel_settings(static_cast<const kernels::KernelSettings*>(previous_));
}

namespace kernels {

const KernelSettings& kernel_settings() {
  if (const KernelSettings* s = thread_kernel_settings()) return *s;
  // The environment's, once it reads well (a bad value throws here, and again next time).
  static const KernelSettings process = [] {
    KernelSettings s = settings_of(Runtime::from_environment(), "TORCHMT_CPU_ISA", "TORCHMT_PACKED_GEMM");
    return s;
  }();
  return process;
}

}  // namespace kernels

}  // namespace torchmt
