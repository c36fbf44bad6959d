#pragma once
// How every torch::nn::Linear in the model is made and applied.
//
// The C++ frontend's Linear::forward computes `matmul(x, W^T)` and then `+= bias` for
// inputs of rank > 2. Under autocast the in-place add is not cast, so an fp32 bias is added
// into a bf16 output through TensorIterator's mixed-dtype path (the output copied to fp32
// and back), a sizeable share of a bf16 training step on the CPU (tools/bench/DECISIONS.md).
// at::linear, which Python's nn.Linear calls, is autocast-aware and fuses the bias into addmm.
//
// The model's Linear layers are torch::nn::Linear (same class, parameters `weight`, `bias`)
// whose implementation can also hold an int8 copy of the weight for CPU decoding
// (quantize_linears_int8, `translate --dtype int8`); apply_linear then uses it whenever
// gradients are off and the input is on the CPU.
#include <memory>
#include <vector>

#include <torch/nn/modules/linear.h>

#include "torchmt/model/packed_linear.h"
#include "torchmt/model/screened_argmax.h"

namespace torchmt {

struct Int8LinearWeights;

class QuantizableLinearImpl : public torch::nn::LinearImpl {
 public:
  using torch::nn::LinearImpl::LinearImpl;
  // weight [out, in] and bias [out] allocated but not initialised (see SkipParameterInit).
  struct Uninitialized {};
  QuantizableLinearImpl(int64_t in_features, int64_t out_features, Uninitialized);
  std::shared_ptr<const Int8LinearWeights> int8;  // set by quantize_linears_int8; null = float
  // fp32 CPU inference: the weight packed for MKL's GEMM, made on first use (packed_linear.h).
  std::shared_ptr<PackedWeightCache> packed = std::make_shared<PackedWeightCache>();
  // Greedy decoding's argmax over this layer's outputs (screened_argmax.h), made on first use.
  std::shared_ptr<ScreenedArgmaxCache> screen = std::make_shared<ScreenedArgmaxCache>();
};

// While one is alive on this thread, the model's modules allocate their parameters without
// drawing random values: a model about to receive a checkpoint's weights (the loader checks
// that every parameter is overwritten). Drawing them was most of building the model, and a
// visible part of a short `translate`'s start-up.
class SkipParameterInit {
 public:
  SkipParameterInit();
  ~SkipParameterInit();
  SkipParameterInit(const SkipParameterInit&) = delete;
  SkipParameterInit& operator=(const SkipParameterInit&) = delete;
  static bool active();

 private:
  bool previous_;
};

// A torch::nn::Linear(in, out) whose implementation is a QuantizableLinearImpl.
torch::nn::Linear make_linear(int64_t in_features, int64_t out_features);

torch::Tensor apply_linear(const torch::nn::Linear& layer, const torch::Tensor& x);

// For each row of x [N, in]: the index of the largest of apply_linear(layer, x)'s outputs in that
// row, or -1 where the caller must compute the row in full (screened_argmax.h); empty when the
// screen does not apply (int8 layers, training, other devices or dtypes, more rows).
std::vector<int64_t> try_linear_argmax(const torch::nn::Linear& layer, const torch::Tensor& x);

// Gives every Linear of `module` (recursively) an int8 copy of its current weight; returns how
// many. `enable` false drops the copies (float again).
int64_t quantize_linears_int8(torch::nn::Module& module, bool enable = true);

}  // namespace torchmt
