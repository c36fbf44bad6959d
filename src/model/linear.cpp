#include "torchmt/model/linear.h"

#include <torch/torch.h>

#include "torchmt/model/int8_linear.h"
#include "torchmt/model/small_batch_linear.h"

namespace torchmt {

namespace {
thread_local bool skip_parameter_init = false;
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

torch::Tensor apply_linear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  const auto* q = dynamic_cast<const QuantizableLinearImpl*>(layer.get());
  if (q && q->int8 && !torch::GradMode::is_enabled() && x.device().is_cpu()) return int8_linear(x, *q->int8);
  auto y = try_small_batch_linear_cpu(x, layer->weight, layer->bias);
  if (!y.defined() && q) y = q->packed->try_linear(x, layer->weight, layer->bias, kSmallBatchLinearMaxRows);
  return y.defined() ? y : torch::linear(x, layer->weight, layer->bias);
}

std::vector<int64_t> try_linear_argmax(const torch::nn::Linear& layer, const torch::Tensor& x) {
  const auto* q = dynamic_cast<const QuantizableLinearImpl*>(layer.get());
  if (!q || q->int8) return {};
  return q->screen->try_argmax(x, layer->weight, layer->bias);
}

int64_t quantize_linears_int8(torch::nn::Module& module, bool enable) {
  int64_t count = 0;
  for (const auto& child : module.modules(/*include_self=*/true)) {
    auto* linear = dynamic_cast<QuantizableLinearImpl*>(child.get());
    if (!linear) continue;
    linear->int8 = enable ? quantize_linear_int8(linear->weight, linear->bias) : nullptr;
    ++count;
  }
  return count;
}

}  // namespace torchmt
