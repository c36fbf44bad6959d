#pragma once
// A float linear layer in CPU inference with its weight packed once for a GEMM library.
//
// Why: at::linear calls MKL's sgemm, which re-packs the whole weight matrix into its blocked
// layout on every call. With the few dozen rows of a decoding step that copy is most of the
// call; packing once gives the same values (tools/bench/DECISIONS.md).
//
// Two packed GEMMs can serve: MKL's packed API (cblas_sgemm_pack / cblas_sgemm_compute, looked
// up at run time in the LibTorch that is loaded) and oneDNN's, through LibTorch's own
// mkldnn::_reorder_linear_weight / mkldnn::_linear_pointwise operators. Which is faster
// depends on the CPU: MKL takes a generic AVX2 path on AMD, where oneDNN's JIT uses AVX-512.
// So it is measured, not guessed: the first time a weight shape is packed on a machine, each
// available library (and plain at::linear) runs that call three times and the fastest is
// kept for the shape, remembered between runs in
// the probe cache (probe_cache.h, file gemm-probe.tsv), so a machine keeps one choice and its
// outputs stay the same from run to run.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torchmt {

struct PackedLinearWeights;

enum class PackedGemm { kAten, kMkl, kOnednn };  // kAten: at::linear, nothing packed
std::string packed_gemm_name(PackedGemm gemm);

class PackedWeightCache {
 public:
  // x W^T + b for inference (grad mode off, no autocast) on the CPU in fp32 with more than
  // `min_rows` rows; undefined when it does not apply or when at::linear was measured the
  // fastest for this shape (the caller uses at::linear). Safe to call from several threads.
  at::Tensor try_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, int64_t min_rows);
  // The packed GEMMs this process's LibTorch has (MKL's, oneDNN's), in that order.
  static std::vector<PackedGemm> available_gemms();
  // Whether any packed GEMM is available.
  static bool available();
  // Makes every cache use `gemm` (nullopt: back to the measured choice); for tests and A/B
  // measurements, as the environment variable TORCHMT_PACKED_GEMM=aten|mkl|onednn does.
  static void force_gemm(std::optional<PackedGemm> gemm);

 private:
  std::shared_ptr<const PackedLinearWeights> packed_;  // read and replaced atomically
};

}  // namespace torchmt
