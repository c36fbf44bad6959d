#include "model/activation_checkpoint.h"

#include <ATen/Context.h>
#include <torch/torch.h>

#include "torchmt/util/device.h"

namespace torchmt {
namespace {

// What the recomputation must see again: fn, the random state before the forward pass (CPU
// and, when the inputs are there, the CUDA generator), and the autocast dtype.
struct Replay : torch::CustomClassHolder {
  CheckpointedFn fn;
  at::Tensor cpu_rng, device_rng;
  c10::Device device{c10::kCPU};
  c10::ScalarType autocast = c10::ScalarType::Float;
};

at::Generator generator_of(const c10::Device& device) {
  return device.is_cpu() ? at::detail::getDefaultCPUGenerator() : at::globalContext().defaultGenerator(device);
}

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  // `inputs` as a TensorList: autograd counts a TensorList's tensors as inputs (a
  // std::vector<Tensor> argument would be an opaque value, and nothing would flow back).
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                c10::intrusive_ptr<Replay> replay, at::TensorList inputs) {
    ctx->saved_data["replay"] = c10::IValue::make_capsule(replay);
    std::vector<at::Tensor> list(inputs.begin(), inputs.end());
    ctx->save_for_backward(list);
    torch::NoGradGuard no_grad;  // (Function::apply already runs forward without recording)
    return replay->fn(list);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto replay = ctx->saved_data["replay"].toCapsule();
    auto* r = static_cast<Replay*>(replay.get());
    auto saved = ctx->get_saved_variables();
    std::vector<at::Tensor> inputs;
    for (const auto& t : saved) {
      if (!t.defined()) {
        inputs.push_back(t);
        continue;
      }
      auto leaf = t.detach();
      leaf.requires_grad_(t.requires_grad());
      inputs.push_back(leaf);
    }
    std::vector<at::Tensor> outputs;
    {
      // Replay the random state, then put back the one backward found.
      auto cpu = at::detail::getDefaultCPUGenerator();
      const auto cpu_now = cpu.get_state();
      cpu.set_state(r->cpu_rng);
      at::Tensor device_now;
      if (r->device_rng.defined()) {
        auto gen = generator_of(r->device);
        device_now = gen.get_state();
        gen.set_state(r->device_rng);
      }
      torch::AutoGradMode grad_on(true);
      AutocastGuard autocast(r->device, r->autocast);
      outputs = r->fn(inputs);
      cpu.set_state(cpu_now);
      if (device_now.defined()) generator_of(r->device).set_state(device_now);
    }
    // Outputs nothing downstream used arrive with zero gradients (materialised by autograd);
    // an output that does not depend on a parameter or input has no graph to go through.
    torch::autograd::variable_list heads, head_grads;
    for (size_t i = 0; i < outputs.size(); ++i)
      if (outputs[i].defined() && outputs[i].requires_grad()) heads.push_back(outputs[i]), head_grads.push_back(grads[i]);
    if (!heads.empty()) torch::autograd::backward(heads, head_grads);
    torch::autograd::variable_list out;
    out.emplace_back();  // replay
    for (const auto& t : inputs) out.push_back(t.defined() && t.requires_grad() ? t.grad() : at::Tensor());
    return out;
  }
};

}  // namespace

std::vector<at::Tensor> checkpoint(CheckpointedFn fn, const std::vector<at::Tensor>& inputs) {
  if (!at::GradMode::is_enabled()) return fn(inputs);
  auto replay = c10::make_intrusive<Replay>();
  replay->fn = std::move(fn);
  for (const auto& t : inputs)
    if (t.defined()) {
      replay->device = t.device();
      break;
    }
  replay->cpu_rng = at::detail::getDefaultCPUGenerator().get_state();
  if (!replay->device.is_cpu()) replay->device_rng = generator_of(replay->device).get_state();
  replay->autocast = active_autocast_dtype(replay->device);
  return CheckpointFunction::apply(replay, at::TensorList(inputs));
}

}  // namespace torchmt
