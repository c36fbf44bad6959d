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
// whose implementation can also hold its weight prepared for CPU inference
// (prepare_linears_for_inference: packed for the GEMM, or int8 for `translate --dtype int8`, and
// the output projection's greedy screen); apply_linear uses it whenever gradients are off and
// the input is on the CPU.
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <torch/nn/modules/linear.h>

namespace torchmt {

struct PreparedLinear;  // linear.cpp: the kernels' packed, int8 and screened forms of a weight

// A Linear layer's calibrated input range (static int8: export --calibrate, torchmt/export/calibration.h).
struct ActivationRange {
  float amax = 0.f;           // max |x| seen; 0 = not calibrated (int8 then quantizes each row over its own range)
  bool has_negative = true;   // whether a negative input was seen
};

class QuantizableLinearImpl : public torch::nn::LinearImpl {
 public:
  using torch::nn::LinearImpl::LinearImpl;
  // weight [out, in] and bias [out] allocated but not initialised (see SkipParameterInit).
  struct Uninitialized {};
  QuantizableLinearImpl(int64_t in_features, int64_t out_features, Uninitialized);
  // Set by prepare_linears_for_inference; null: the float layer as trained. Used only while the
  // weight and bias are the ones it was made from (same storage, no in-place change since).
  std::shared_ptr<const PreparedLinear> prepared;
  // Static int8: prepare_linears_for_inference(kInt8) quantizes every input over this range.
  ActivationRange input_range;
  // Its input is a ReLU's output (a feed-forward layer's second Linear), mostly zeros: fp32 CPU
  // inference skips them (kernels::try_sparse_input_linear) unless TORCHMT_SPARSE_INPUT=0.
  bool sparse_input = false;
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

// The layers that read the same input as one GEMM (attention's Q, K and V in training): the
// weights and biases concatenated per call, so the parameters stay the layers' own, and the output
// split into one view per layer ([..., out_i] each). Gradients flow to every layer as apply_linear's
// do. Not for inference: prepared layers keep apply_linear, one at a time.
std::vector<torch::Tensor> apply_linears_together(const std::vector<const torch::nn::Linear*>& layers,
                                                  const torch::Tensor& x);

// While one is alive on this thread, apply_linear hands every layer's input to `observe` before
// computing it: static int8 calibration records each Linear's input range (export --calibrate).
class ObserveLinearInputs {
 public:
  using Observer = std::function<void(const torch::nn::LinearImpl& layer, const torch::Tensor& x)>;
  explicit ObserveLinearInputs(Observer observe);
  ~ObserveLinearInputs();
  ObserveLinearInputs(const ObserveLinearInputs&) = delete;
  ObserveLinearInputs& operator=(const ObserveLinearInputs&) = delete;

 private:
  Observer observe_;
  const Observer* previous_;
};

// For each row of x [N, in]: the index of the largest of apply_linear(layer, x)'s outputs in that
// row, or -1 where the caller must compute the row in full (the screened projection of
// src/kernels/primitives.h); empty when the layer has no screen (not prepared with one, int8) or
// it does not apply (training, other devices or dtypes). blocked (optional) [N, out] bool: the
// outputs each row may not produce.
std::vector<int64_t> try_linear_argmax(const torch::nn::Linear& layer, const torch::Tensor& x,
                                       const torch::Tensor& blocked = torch::Tensor());

// Beam search's step through the same screen: for each row of x [N, in], the `width` largest
// entries of log_softmax(apply_linear(layer, x)) (values [N, width], best first, equal ones in
// index order; indices [N, width] int64) and the entries of the `extra` columns (extra [N, E]),
// within ~2e-4 of the full computation's (mean); rows listed in `open` are left for the caller to compute
// in full. Nothing where the layer has no screen or it does not apply.
struct LinearTopK {
  torch::Tensor values, indices, extra;
  std::vector<int64_t> open;
};
std::optional<LinearTopK> try_linear_log_softmax_top_k(const torch::nn::Linear& layer, const torch::Tensor& x,
                                                       int64_t width, const std::vector<int64_t>& extra);

enum class InferencePrecision { kFloat, kInt8 };

// Prepares every Linear of `module` (recursively) for CPU inference from its current weights, once:
// kFloat picks each fp32 CPU weight's packed GEMM by the kernels' rule table (the weight is packed
// by the first call with more rows than the few-row kernel takes, once: a translator decoding one
// sentence at a time packs its encoder's, not its decoder's); kInt8 quantizes them (per row, 127 steps; inputs over each
// layer's input_range where calibrated); `screened` (the output projection, or null) also gets
// greedy search's int8 screen at kFloat. Returns how many layers were prepared. Done when a model
// is loaded for inference (load_translator) and around validation's decoding.
// `release_all_but` (null: none): each layer but that one keeps one copy of its weight as soon
// as it is prepared, as release_float_weights does.
int64_t prepare_linears_for_inference(torch::nn::Module& module, InferencePrecision precision,
                                      const torch::nn::Linear* screened = nullptr,
                                      const torch::nn::Linear* release_all_but = nullptr);
// Drops every Linear's preparation (float, as trained, again).
void release_inference_preparation(torch::nn::Module& module);
// For a model that only translates from now on (load_translator): every prepared Linear but `keep`
// (the output projection: shortlists slice it, the embeddings may share it) keeps one copy of its
// weight. An int8 layer's fp32 weight is freed, leaving a one-element stand-in of the same shape:
// it then runs its int8 kernel only, and a call the kernel cannot serve (grad mode, another
// device) throws std::logic_error naming the cause. An fp32 sparse-input layer's weight becomes
// the [out, in] view of its kernel's W^T (best for fp32 translation: bf16 copies it per call).
// Returns the bytes freed.
int64_t release_float_weights(torch::nn::Module& module, const torch::nn::Linear* keep);
// The bytes of packed weight copies the module's Linear layers hold so far (made by their first
// call with more rows than the few-row kernel takes).
int64_t packed_weight_bytes(torch::nn::Module& module);
// Whether the layer is prepared to run int8.
bool runs_int8(const torch::nn::Linear& layer);
// The outputs `rows` ([U] int64, on the weight's device) of `layer` as a layer of their own,
// prepared as `layer` is (int8, packed, or not): the output projection under a shortlist. Its
// int8 rows are the same integers as the whole layer's (the quantization is per row), and an int8
// part keeps no fp32 copy of them (released, as release_float_weights).
torch::nn::Linear select_output_rows(const torch::nn::Linear& layer, const torch::Tensor& rows);
// One layer over the concatenated inputs of `layers` (same outputs) computing the weighted sum of
// their outputs: weight [out, sum of in] = [s_0 W_0 | s_1 W_1 | ...], bias sum of s_i b_i (an
// ensemble's output projections as one). Prepared as layers[0] is (int8, or packed with its
// screen), from the layers' float weights, which must be there.
torch::nn::Linear stack_linear_inputs(const std::vector<torch::nn::Linear>& layers, const std::vector<double>& scales);

}  // namespace torchmt
