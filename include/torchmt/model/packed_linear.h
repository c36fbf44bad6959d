#pragma once
// A float linear layer in CPU inference with its weight packed once for MKL's GEMM.
//
// Why: at::linear calls MKL's sgemm, which re-packs the whole weight matrix into its blocked
// layout on every call. With the few dozen rows of a decoding step that copy is most of the
// call: a [28, 512] x [512, 8000] output projection took 2.36-2.49 ms through at::linear and
// 1.47-1.64 ms with the weight packed once (1 thread, this project's 2-core Xeon; [8, ...]:
// 1.72 vs 0.69 ms, [64, ...]: 3.69-4.00 vs 2.96-3.05 ms), the same values. MKL's packed API
// (cblas_sgemm_pack / cblas_sgemm_compute) is looked up at run time in the LibTorch that is
// loaded; where it is absent (a LibTorch without MKL) nothing changes.
#include <memory>

#include <ATen/core/Tensor.h>

namespace torchmt {

struct PackedLinearWeights;

// The weight in MKL's packed layout, for the weight tensor's data and version it was made
// from (an optimizer step or a load changes the version: it is then packed again).
class PackedWeightCache {
 public:
  // x W^T + b for inference (grad mode off, no autocast) on the CPU in fp32 with more than
  // `min_rows` rows; undefined when it does not apply (the caller uses at::linear). Safe to call
  // from several threads at once.
  at::Tensor try_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, int64_t min_rows);
  // Whether this process's LibTorch has MKL's packed GEMM.
  static bool available();

 private:
  std::shared_ptr<const PackedLinearWeights> packed_;  // read and replaced atomically
};

}  // namespace torchmt
