#pragma once
// What used to be process policy, as an object a program builds and hands to the library: the
// instruction set of torchmt's CPU kernels and their switches (the environment table's
// TORCHMT_CPU_ISA, TORCHMT_PACKED_GEMM, TORCHMT_SCREENED_ARGMAX, TORCHMT_SCREENED_BEAM,
// TORCHMT_SPARSE_INPUT) and a translator's thread plan (CTranslate2's inter_threads x
// intra_threads). The CLI builds one from the environment table (from_environment) and hands it
// to the Translator (TranslatorConfig::runtime, Translator::set_runtime), and so to the server,
// and to the trainer; a program that embeds torchmt builds its own, one per translator if it
// likes. What can only be process-wide is the program's to ask for: the allocator (util/heap.h),
// LibTorch's GPU attention backends (use_shape_free_cuda_attention, util/device.h) and ISAs
// (limit_library_isas).
//
//   Runtime rt;                     // the detected instruction set, every kernel switch on
//   rt.cpu_isa = "avx2";
//   rt.inter_threads = 2;           // 2 batches at a time on the translator's own threads
//   translator.set_runtime(rt);     // its batches, its preparation and the server's steps run
//                                   // under rt, on whichever thread runs them
//
// How it reaches the kernels: a RuntimeScope on a thread makes that thread's kernels, and the
// helper threads of torchmt's parallel loops it starts, use it; a thread without one uses the
// process's defaults, which are the environment table's values (read, never written).
#include <cstdint>
#include <memory>
#include <string>

namespace torchmt {

struct Runtime {
  // The kernels' instruction set: "" = the detected one; portable | avx2 | avx512 | avx512-vnni |
  // avx512-bf16 | avx512-amx, at most what this CPU runs.
  std::string cpu_isa;
  // The float GEMM of packed CPU linear layers: "" = the rule table (src/kernels/packed_linear.cpp);
  // aten (nothing packed) | mkl | onednn.
  std::string packed_gemm;
  // Greedy search without scores screens the output projection with an int8 copy (same tokens).
  bool screened_argmax = true;
  // fp32 beam search on the CPU screens the output projection (int8 logits in the tail, ~2e-4).
  bool screened_beam = true;
  // A ReLU feed-forward layer's second Linear skips zero inputs.
  bool sparse_input = true;
  // A translator's thread plan, for one shared by the threads of another program: with
  // inter_threads >= 1, translate() runs every batch on the translator's own threads, never on
  // the caller's, at most inter_threads batches at a time whoever calls (callers share them), each
  // with intra_threads threads inside its operations (0: the translator's CPU threads /
  // inter_threads); the caller's thread settings are never touched. 0: translate() plans each job
  // (Translator::plan_workers). The trainer has its own (--threads).
  int64_t inter_threads = 0;
  int64_t intra_threads = 0;

  // The environment table's values (std::invalid_argument naming the variable on a bad one).
  static Runtime from_environment();
  // std::invalid_argument naming the field on a value it cannot run.
  void validate() const;
  bool operator==(const Runtime& other) const;
  bool operator!=(const Runtime& other) const { return !(*this == other); }
};

// While alive, the calling thread's kernels (and the helper threads of torchmt's parallel loops
// it starts) run under `runtime`. Nestable per thread; validates (std::invalid_argument).
class RuntimeScope {
 public:
  explicit RuntimeScope(const Runtime& runtime);
  ~RuntimeScope();
  RuntimeScope(const RuntimeScope&) = delete;
  RuntimeScope& operator=(const RuntimeScope&) = delete;

 private:
  std::shared_ptr<const void> settings_;
  const void* previous_;
};

}  // namespace torchmt
