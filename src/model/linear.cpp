#include "model/linear.h"

#include <mutex>
#include <stdexcept>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "../kernels/parallel.h"
#include "../kernels/primitives.h"

namespace torchmt {

// A weight's packed copy for the many-row GEMM, made by the first call that runs it (more rows
// than the few-row kernel takes), once, whichever thread comes first: a translator that decodes a
// sentence at a time never packs its decoder's weights or its output projection, which only meet
// the few-row kernels (tools/bench/DECISIONS.md).
struct LazyPackedWeight {
  kernels::PackedGemm gemm = kernels::PackedGemm::kAten;  // the rule table's, chosen at preparation
  std::once_flag once;
  kernels::PackedWeights packed;
};

struct PreparedLinear {
  // The parameters it was made from: apply_linear ignores it once they change.
  const void* weight_data = nullptr;
  const void* bias_data = nullptr;
  uint32_t weight_version = 0, bias_version = 0;
  std::shared_ptr<const kernels::Int8LinearWeights> int8;  // kInt8
  std::shared_ptr<LazyPackedWeight> packed;                // kFloat (gemm kAten: nothing to pack)
  std::shared_ptr<const kernels::ScreenedProjection> screen;
  std::shared_ptr<const kernels::SparseInputWeights> sparse_input;  // kFloat, for a ReLU's output
  bool float_released = false;  // release_float_weights: int8 is all the layer has
};

namespace {
thread_local bool skip_parameter_init = false;
thread_local const ObserveLinearInputs::Observer* linear_observer = nullptr;

// The layer's preparation when it applies to this call: inference on the CPU, same parameters.
const PreparedLinear* usable_preparation(const QuantizableLinearImpl* q, const torch::Tensor& x) {
  if (!q || !q->prepared || torch::GradMode::is_enabled() || !x.device().is_cpu()) return nullptr;
  const PreparedLinear& p = *q->prepared;
  if (p.float_released) return &p;
  const bool same = p.weight_data == q->weight.data_ptr() &&
                    p.weight_version == static_cast<uint32_t>(q->weight._version()) &&
                    p.bias_data == (q->bias.defined() ? q->bias.data_ptr() : nullptr) &&
                    (!q->bias.defined() || p.bias_version == static_cast<uint32_t>(q->bias._version()));
  return same ? &p : nullptr;
}

std::shared_ptr<LazyPackedWeight> lazy_pack(const torch::Tensor& w) {
  auto lazy = std::make_shared<LazyPackedWeight>();
  lazy->gemm = kernels::packed_gemm_for(w.size(0), w.size(1));
  return lazy;
}

// x W^T + b through the layer's packed weight, packing it first if this is its first such call;
// undefined where the packed GEMM does not apply (as kernels::try_packed_linear).
torch::Tensor packed_linear(LazyPackedWeight& lazy, const torch::nn::LinearImpl& layer, const torch::Tensor& x) {
  if (!kernels::packed_gemm_serves(lazy.gemm, x)) return {};  // only a call it serves packs
  std::call_once(lazy.once, [&] {
    c10::InferenceMode not_inference(false);  // as a pack made at load: an ordinary tensor
    torch::NoGradGuard no_grad;
    lazy.packed = kernels::pack_weight(layer.weight, lazy.gemm);
  });
  return kernels::try_packed_linear(lazy.packed, x, layer.bias);
}

// The fp32 weight of an int8-prepared layer replaced by a one-element stand-in of its shape;
// the bytes freed (0 when the layer has no int8 preparation or was released already).
int64_t release_float_weight(QuantizableLinearImpl& linear) {
  if (!linear.prepared || !linear.prepared->int8 || linear.prepared->float_released) return 0;
  torch::NoGradGuard no_grad;
  const torch::Tensor& w = linear.weight;
  const auto freed = static_cast<int64_t>(w.nbytes());
  w.set_data(torch::zeros({1}, w.options()).expand(w.sizes()));  // [out, in], one element stored
  auto p = std::make_shared<PreparedLinear>(*linear.prepared);
  p->float_released = true;
  linear.prepared = std::move(p);
  return freed;
}

// A sparse-input layer's fp32 weight replaced by the [out, in] view of its kernel's W^T: one copy
// of the weight (dense products read the view transposed, as BLAS takes either layout). Returns
// the bytes freed.
int64_t share_sparse_input_weight(QuantizableLinearImpl& linear) {
  if (!linear.prepared || !linear.prepared->sparse_input || linear.prepared->float_released) return 0;
  const kernels::SparseInputWeights& sparse = *linear.prepared->sparse_input;
  if (linear.weight.data_ptr() == sparse.wt) return 0;
  torch::NoGradGuard no_grad;
  const auto freed = static_cast<int64_t>(linear.weight.nbytes());
  linear.weight.set_data(sparse.transposed.t());  // [out, in], strides [1, out]
  auto p = std::make_shared<PreparedLinear>(*linear.prepared);
  p->weight_data = linear.weight.data_ptr();
  p->weight_version = static_cast<uint32_t>(linear.weight._version());
  linear.prepared = std::move(p);
  return freed;
}

// What a layer that only translates from now on keeps: one copy of its weight.
int64_t keep_one_copy(QuantizableLinearImpl& linear) {
  return release_float_weight(linear) + share_sparse_input_weight(linear);
}

// An empty preparation of the layer's present parameters.
std::shared_ptr<PreparedLinear> made_from(const QuantizableLinearImpl& linear) {
  auto p = std::make_shared<PreparedLinear>();
  p->weight_data = linear.weight.data_ptr();
  p->weight_version = static_cast<uint32_t>(linear.weight._version());
  if (linear.bias.defined()) {
    p->bias_data = linear.bias.data_ptr();
    p->bias_version = static_cast<uint32_t>(linear.bias._version());
  }
  return p;
}
}  // namespace

SkipParameterInit::SkipParameterInit() : previous_(skip_parameter_init) { skip_parameter_init = true; }
SkipParameterInit::~SkipParameterInit() { skip_parameter_init = previous_; }
bool SkipParameterInit::active() { return skip_parameter_init; }

QuantizableLinearImpl::QuantizableLinearImpl(int64_t in_features, int64_t out_features, Uninitialized)
    // LinearImpl's constructor always initialises its parameters (reset() runs before a derived
    // class exists), so it gets a layer with no outputs (empty tensors: nothing drawn; one
    // input keeps its bias bound finite), whose options and parameters are then replaced in
    // the same dict slots (Module::parameters_, protected, reachable from a derived class).
    : torch::nn::LinearImpl(torch::nn::LinearOptions(1, 0)) {
  options = torch::nn::LinearOptions(in_features, out_features);
  weight = torch::empty({out_features, in_features});
  parameters_["weight"] = weight;
  bias = torch::empty({out_features});
  parameters_["bias"] = bias;
}

torch::nn::Linear make_linear(int64_t in_features, int64_t out_features) {
  // As the base class's pointer: ModuleHolder's forwarding constructor would take a derived one
  // as constructor arguments for a new LinearImpl.
  std::shared_ptr<torch::nn::LinearImpl> impl =
      SkipParameterInit::active()
          ? std::make_shared<QuantizableLinearImpl>(in_features, out_features, QuantizableLinearImpl::Uninitialized{})
          : std::make_shared<QuantizableLinearImpl>(in_features, out_features);
  return torch::nn::Linear(std::move(impl));
}

ObserveLinearInputs::ObserveLinearInputs(Observer observe) : observe_(std::move(observe)), previous_(linear_observer) {
  linear_observer = &observe_;
}
ObserveLinearInputs::~ObserveLinearInputs() { linear_observer = previous_; }

torch::Tensor apply_linear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  if (linear_observer) (*linear_observer)(*layer, x);
  const auto* q = dynamic_cast<const QuantizableLinearImpl*>(layer.get());
  const auto* p = usable_preparation(q, x);
  if (!p && q && q->prepared && q->prepared->float_released)
    throw std::logic_error(std::string("a Linear loaded for int8 inference only (its fp32 weights released) was called ") +
                           (torch::GradMode::is_enabled() ? "with gradients on" : "on " + x.device().str()));
  if (p && p->int8) return kernels::int8_linear(x, *p->int8);
  if (p && p->sparse_input) {
    auto y = kernels::try_sparse_input_linear(*p->sparse_input, x);
    if (y.defined()) return y;
  }
  auto y = kernels::try_small_batch_linear_cpu(x, layer->weight, layer->bias);
  if (!y.defined() && p && p->packed) y = packed_linear(*p->packed, *layer, x);
  return y.defined() ? y : torch::linear(x, layer->weight, layer->bias);
}

std::vector<torch::Tensor> apply_linears_together(const std::vector<const torch::nn::Linear*>& layers,
                                                  const torch::Tensor& x) {
  std::vector<torch::Tensor> weights, biases;
  std::vector<int64_t> sizes;
  for (const auto* layer : layers) {
    weights.push_back((*layer)->weight);
    if ((*layer)->bias.defined()) biases.push_back((*layer)->bias);
    sizes.push_back((*layer)->weight.size(0));
  }
  if (!biases.empty() && biases.size() != layers.size())
    throw std::invalid_argument("apply_linears_together: every layer has a bias or none does");
  const auto y = torch::linear(x, torch::cat(weights), biases.empty() ? torch::Tensor() : torch::cat(biases));
  return y.split_with_sizes(sizes, -1);  // [..., out_i] each
}

std::vector<int64_t> try_linear_argmax(const torch::nn::Linear& layer, const torch::Tensor& x,
                                       const torch::Tensor& blocked) {
  const auto* p = usable_preparation(dynamic_cast<const QuantizableLinearImpl*>(layer.get()), x);
  if (!p || !p->screen) return {};
  return kernels::try_screened_argmax(*p->screen, x, layer->weight, layer->bias, blocked);
}

std::optional<LinearTopK> try_linear_log_softmax_top_k(const torch::nn::Linear& layer, const torch::Tensor& x,
                                                       int64_t width, const std::vector<int64_t>& extra) {
  const auto* p = usable_preparation(dynamic_cast<const QuantizableLinearImpl*>(layer.get()), x);
  if (!p || !p->screen) return std::nullopt;
  LinearTopK top;
  if (!kernels::try_screened_log_softmax_top_k(*p->screen, x, layer->weight, layer->bias, width, extra, &top.values,
                                               &top.indices, &top.extra, &top.open))
    return std::nullopt;
  return top;
}

int64_t prepare_linears_for_inference(torch::nn::Module& module, InferencePrecision precision,
                                      const torch::nn::Linear* screened, const torch::nn::Linear* release_all_but) {
  std::vector<QuantizableLinearImpl*> linears;
  for (const auto& child : module.modules(/*include_self=*/true))
    if (auto* linear = dynamic_cast<QuantizableLinearImpl*>(child.get())) linears.push_back(linear);
  const bool sparse_input_enabled = kernels::kernel_settings().sparse_input;
  // Layers are prepared on all cores at once: packing and quantizing is most of a model's load.
  kernels::parallel_for(0, static_cast<int64_t>(linears.size()), 1, [&](int64_t begin, int64_t end) {
    torch::NoGradGuard no_grad;
    for (int64_t i = begin; i < end; ++i) {
      QuantizableLinearImpl* linear = linears[static_cast<size_t>(i)];
      auto p = made_from(*linear);
      const torch::Tensor& w = linear->weight;
      const torch::Tensor& b = linear->bias;
      const bool fp32_cpu = w.device().is_cpu() && w.scalar_type() == torch::kFloat;
      if (precision == InferencePrecision::kInt8) {
        p->int8 = kernels::quantize_linear_int8(w, b, linear->input_range.amax, linear->input_range.has_negative);
      } else if (fp32_cpu) {
        p->packed = lazy_pack(w);
        if (linear->sparse_input && sparse_input_enabled) p->sparse_input = kernels::pack_sparse_input_weight(w, b);
        if (screened && screened->get() == linear) p->screen = kernels::build_screen(w, b);
      }
      linear->prepared = std::move(p);
      // Layer by layer: the load's peak holds one layer's two copies, not the model's.
      if (release_all_but && release_all_but->get() != linear) keep_one_copy(*linear);
    }
  });
  return static_cast<int64_t>(linears.size());
}

bool runs_int8(const torch::nn::Linear& layer) {
  const auto* q = dynamic_cast<const QuantizableLinearImpl*>(layer.get());
  return q && q->prepared && q->prepared->int8;
}

torch::nn::Linear select_output_rows(const torch::nn::Linear& layer, const torch::Tensor& rows) {
  // Ordinary tensors even when called in InferenceMode (a search): a preparation checks its
  // weight's version, which inference tensors do not have.
  c10::InferenceMode not_inference(false);
  torch::NoGradGuard no_grad;
  torch::nn::Linear part = nullptr;
  {
    SkipParameterInit skip;
    part = make_linear(layer->weight.size(1), rows.size(0));
  }
  const auto* q = dynamic_cast<const QuantizableLinearImpl*>(layer.get());
  const auto* whole = q ? usable_preparation(q, layer->weight) : nullptr;
  // An int8 part runs on its int8 rows alone: no fp32 copy of them (as release_float_weights).
  const bool int8_only = whole && whole->int8;
  part->weight.set_data(int8_only ? torch::zeros({1}, layer->weight.options()).expand({rows.size(0), layer->weight.size(1)})
                                  : layer->weight.index_select(0, rows));  // [U, in]
  part->bias.set_data(layer->bias.defined() ? layer->bias.index_select(0, rows)
                                            : torch::zeros({rows.size(0)}, layer->weight.options()));
  if (!q) return part;
  auto* p_part = part->as<QuantizableLinearImpl>();
  p_part->input_range = q->input_range;  // same inputs as the whole layer
  if (!whole) return part;
  // The int8 rows and the screen are taken from the whole layer's, not quantized anew: a
  // shortlist restricts the output projection once per batch.
  const auto r = rows.to(torch::kCPU, torch::kLong).contiguous();
  const std::vector<int64_t> list(r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel());
  auto p = made_from(*p_part);
  if (int8_only) {
    p->int8 = kernels::select_int8_rows(*whole->int8, list);
    p->float_released = true;
  } else if (part->weight.device().is_cpu() && part->weight.scalar_type() == torch::kFloat) {
    p->packed = lazy_pack(part->weight);
    // The part screened where the whole layer is (greedy search's columns).
    if (whole->screen) p->screen = kernels::select_screen_rows(*whole->screen, list, part->weight, part->bias);
  }
  p_part->prepared = std::move(p);
  return part;
}

torch::nn::Linear stack_linear_inputs(const std::vector<torch::nn::Linear>& layers, const std::vector<double>& scales) {
  if (layers.empty() || scales.size() != layers.size())
    throw std::invalid_argument("stack_linear_inputs: " + std::to_string(layers.size()) + " layers, " +
                                std::to_string(scales.size()) + " scales");
  c10::InferenceMode not_inference(false);  // ordinary tensors: a preparation checks their versions
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> weights;
  torch::Tensor bias;
  int64_t inputs = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& l = layers[i];
    if (l->weight.size(0) != layers[0]->weight.size(0))
      throw std::invalid_argument("stack_linear_inputs: layers of " + std::to_string(l->weight.size(0)) + " and " +
                                  std::to_string(layers[0]->weight.size(0)) + " outputs");
    const auto* q = dynamic_cast<const QuantizableLinearImpl*>(l.get());
    if (q && q->prepared && q->prepared->float_released)
      throw std::logic_error("stack_linear_inputs: a layer's fp32 weights were released");
    weights.push_back(l->weight * scales[i]);  // [out, in_i]
    if (l->bias.defined()) bias = bias.defined() ? bias + l->bias * scales[i] : l->bias * scales[i];
    inputs += l->weight.size(1);
  }
  torch::nn::Linear stacked = nullptr;
  {
    SkipParameterInit skip;
    stacked = make_linear(inputs, layers[0]->weight.size(0));
  }
  stacked->weight.set_data(torch::cat(weights, 1));  // [out, sum of in_i]
  stacked->bias.set_data(bias.defined() ? bias : torch::zeros({layers[0]->weight.size(0)}, layers[0]->weight.options()));
  const auto* q = dynamic_cast<const QuantizableLinearImpl*>(layers[0].get());
  if (q && q->prepared && layers[0]->weight.device().is_cpu()) {
    if (q->prepared->int8) prepare_linears_for_inference(*stacked, InferencePrecision::kInt8);
    else prepare_linears_for_inference(*stacked, InferencePrecision::kFloat, q->prepared->screen ? &stacked : nullptr);
  }
  return stacked;
}

int64_t release_float_weights(torch::nn::Module& module, const torch::nn::Linear* keep) {
  int64_t freed = 0;
  for (const auto& child : module.modules(/*include_self=*/true)) {
    auto* linear = dynamic_cast<QuantizableLinearImpl*>(child.get());
    if (linear && !(keep && keep->get() == linear)) freed += keep_one_copy(*linear);
  }
  return freed;
}

int64_t packed_weight_bytes(torch::nn::Module& module) {
  int64_t bytes = 0;
  for (const auto& child : module.modules(/*include_self=*/true)) {
    const auto* linear = dynamic_cast<const QuantizableLinearImpl*>(child.get());
    if (!linear || !linear->prepared || !linear->prepared->packed) continue;
    const auto& buffer = linear->prepared->packed->packed.buffer;  // written once, under the once_flag
    if (buffer.defined()) bytes += static_cast<int64_t>(buffer.nbytes());
  }
  return bytes;
}

void release_inference_preparation(torch::nn::Module& module) {
  for (const auto& child : module.modules(/*include_self=*/true))
    if (auto* linear = dynamic_cast<QuantizableLinearImpl*>(child.get())) linear->prepared.reset();
}

}  // namespace torchmt
