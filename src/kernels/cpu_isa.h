#pragma once
// The instruction sets torchmt's CPU kernels have code for, the one detection of what this CPU
// runs, and the one override (TORCHMT_CPU_ISA). Every kernel picks its code through cpu_isa(),
// per call, so a test or a benchmark can run any path the machine can run (CpuIsaOverride);
// CTranslate2's cpu_isa.h / CPU_ISA_DISPATCH is the model.
#include <string>
#include <type_traits>
#include <vector>

namespace torchmt::kernels {

// Ordered: each level runs everything below it.
enum class CpuIsa : int {
  kPortable = 0,    // C++ only (any x86-64, other architectures)
  kAvx2 = 1,        // AVX2 + FMA (x86-64-v3)
  kAvx512 = 2,      // AVX-512 F/BW/DQ/VL (x86-64-v4)
  kAvx512Vnni = 3,  // + VNNI (int8 dot products)
  kAvx512Bf16 = 4,  // + VNNI + BF16 (bf16 dot products)
  kAvx512Amx = 5,   // + AMX tiles, INT8 and BF16 (int8 tile products), with the OS's permission
};

const char* cpu_isa_name(CpuIsa isa);  // "portable", "avx2", "avx512", "avx512-vnni", "avx512-bf16", "avx512-amx"
// Every level, lowest first.
const std::vector<CpuIsa>& all_cpu_isas();
// The names of the levels up to `highest`, joined by '|' (every level's: the values TORCHMT_CPU_ISA takes).
std::string cpu_isa_names(CpuIsa highest = CpuIsa::kAvx512Amx);
// The highest level this CPU (and its OS) runs.
CpuIsa detected_cpu_isa();
// The level named `name`, one this CPU runs; else a one-line std::invalid_argument naming
// `what` ("TORCHMT_CPU_ISA=avx9: expected portable|avx2|...", "...: this CPU runs at most ...").
CpuIsa cpu_isa_by_name(const std::string& name, const std::string& what);
// Every level up to detected_cpu_isa(), lowest first: what a test runs each kernel on.
std::vector<CpuIsa> available_cpu_isas();
// The level the kernels use: the calling thread's RuntimeScope's, else CpuIsaOverride's, else
// TORCHMT_CPU_ISA when set (a level above the detected one is a one-line std::invalid_argument
// naming the variable), else the detected one.
CpuIsa cpu_isa();
// "avx2 (detected: avx512-bf16, TORCHMT_CPU_ISA=avx2)" for logs and `torchmt info`.
std::string cpu_isa_summary();
// Points LibTorch's libraries at cpu_isa()'s level through their own variables, where unset:
// oneDNN and MKL under TORCHMT_CPU_ISA, ATen's kernels at avx2 wherever AVX2 runs (so that
// `--dtype int8` gives the same lines on every level). Each library reads its variable at its
// first use, so only a program that owns its process calls it, first thing in main (the CLI,
// the tests, the benchmarks); the library itself never changes the environment. A bad
// TORCHMT_CPU_ISA sets nothing (cpu_isa() reports it).
void limit_library_isas();
// Lets oneDNN keep `capacity` compiled primitives (ONEDNN_PRIMITIVE_CACHE_CAPACITY, where unset)
// instead of its 1,024. oneDNN compiles a bf16 GEMM per shape, and a training epoch's batches
// come in more shapes than that: with the default it compiled them again every epoch. Each
// primitive keeps its own scratch memory (~0.7 MB at modern-small), so this trades memory for
// speed. Process policy like limit_library_isas: before the first bf16 matmul.
void size_onednn_primitive_cache(int capacity);
// Training's capacity (train, distill): modern-small bf16 on a 2-core Xeon with AMX, 300 updates:
// 1.19x the target tokens/s at 4.8 instead of 2.8 GB peak (tools/bench/DECISIONS.md).
constexpr int kTrainingOnednnPrimitives = 4096;

// What the kernels are told to do, from a Runtime (include/torchmt/kernels/runtime.h): the
// calling thread's under a RuntimeScope (and its parallel loops' helper threads: parallel.h),
// else the process's, which are the environment table's (read once; a bad value throws
// std::invalid_argument naming the variable, every time it is asked).
struct KernelSettings {
  CpuIsa isa = CpuIsa::kPortable;
  int packed_gemm = -1;  // a PackedGemm (primitives.h) forced, or -1: the rule table
  bool screened_argmax = true, screened_beam = true, sparse_input = true;
};
const KernelSettings& kernel_settings();
// The calling thread's own settings (null: none, the process's apply) and setting them; what
// RuntimeScope and parallel_for (parallel.h) do.
const KernelSettings* thread_kernel_settings();
void set_thread_kernel_settings(const KernelSettings* settings);

// While alive, cpu_isa() returns `isa` on every thread without a RuntimeScope of its own (tests,
// A/B benchmarks); the level must be one this CPU runs. Not nestable across threads: one at a time.
class CpuIsaOverride {
 public:
  explicit CpuIsaOverride(CpuIsa isa);
  ~CpuIsaOverride();
  CpuIsaOverride(const CpuIsaOverride&) = delete;
  CpuIsaOverride& operator=(const CpuIsaOverride&) = delete;

 private:
  int previous_;
};

// The one way to write a kernel's instruction-set variants and the one way to pick one
// (CTranslate2's templates on CpuIsa and CPU_ISA_DISPATCH, with target attributes instead of a
// translation unit per level): a kernel with variants is a function template on CpuIsa, each
// variant an explicit specialization for the lowest level it needs, compiled for that level
// (`template <> TORCHMT_TARGET_AVX2 void scan<CpuIsa::kAvx2>(...)`, or TORCHMT_VECTOR_KERNEL's
// copies of one body: vector.h); a caller names the levels the kernel has and gets the variant
// for cpu_isa()'s level through isa_dispatch.
template <CpuIsa L>
using IsaLevel = std::integral_constant<CpuIsa, L>;

namespace detail {
template <typename F>
decltype(auto) isa_dispatch_from(CpuIsa, F&& f) {
  return f(IsaLevel<CpuIsa::kPortable>{});
}
template <CpuIsa First, CpuIsa... Rest, typename F>
decltype(auto) isa_dispatch_from(CpuIsa isa, F&& f) {
  if (isa >= First) return f(IsaLevel<First>{});
  return isa_dispatch_from<Rest...>(isa, f);
}
}  // namespace detail

// f(IsaLevel<L>{}) for the first of `Levels` (highest first) that `isa` reaches, else
// f(IsaLevel<kPortable>{}): `isa_dispatch<CpuIsa::kAvx512, CpuIsa::kAvx2>(isa, [&](auto level) {
// return scan<level>(x); })`. Off x86 only the portable variant is ever named.
template <CpuIsa... Levels, typename F>
decltype(auto) isa_dispatch(CpuIsa isa, F&& f) {
#if defined(__x86_64__) && defined(__GNUC__)
  return detail::isa_dispatch_from<Levels...>(isa, f);
#else
  (void)isa;
  return f(IsaLevel<CpuIsa::kPortable>{});
#endif
}

}  // namespace torchmt::kernels

// The target attributes of the per-instruction-set copies of a kernel (GCC and clang on x86-64).
#if defined(__x86_64__) && defined(__GNUC__)
#define TORCHMT_X86 1
#define TORCHMT_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define TORCHMT_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))
#define TORCHMT_TARGET_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,avx512vnni")))
#define TORCHMT_TARGET_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,avx512bf16")))
#define TORCHMT_TARGET_AVX512_AMX \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,avx512vnni,avx512bf16,amx-tile,amx-int8,amx-bf16")))
#else
#define TORCHMT_X86 0
#endif
