#include "torchmt/training/dtype_probe.h"

#include <chrono>
#include <cstdio>
#include <functional>

#include <ATen/Context.h>
#include <torch/torch.h>

#include "torchmt/data/special_ids.h"
#include "torchmt/io/checkpoint.h"
#include "torchmt/model/transformer.h"
#include "torchmt/training/adam_optimizer.h"
#include "torchmt/training/label_smoothed_cross_entropy.h"
#include "torchmt/training/training_step.h"
#include "torchmt/util/device.h"
#include "torchmt/util/probe_cache.h"

namespace torchmt {
namespace {

// bf16 must beat fp32 by this much to be chosen: it rounds every matmul's inputs, so a tie
// goes to the exact one.
constexpr double kBf16Margin = 1.05;

// Target tokens per second of the model's training step in `dtype` on batches[1..], after
// one step on batches[0]; on a fresh model and optimizer (the run's own are not touched).
double training_tokens_per_second(const ModelConfig& config, const std::vector<Batch>& batches,
                                  const c10::Device& device, c10::ScalarType dtype) {
  Transformer model(config);
  model->to(device);
  model->train();
  AdamOptimizer optimizer(unique_parameters(*model), AdamOptions{});
  TrainingStep step(model, optimizer, LabelSmoothedCrossEntropy(0.1, kPadId), device, dtype, 1.0);
  auto result = step.run({batches[0]}, 1e-4);
  result.wait();
  int64_t tokens = 0;
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 1; i < batches.size(); ++i) {
    auto r = step.run({batches[i]}, 1e-4);
    r.wait();
    tokens += batches[i].tgt_tokens;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(tokens) / std::max(seconds, 1e-9);
}

}  // namespace

DtypeChoice choose_training_dtype(const ModelConfig& config, const std::vector<Batch>& batches,
                                  const c10::Device& device) {
  if (device.is_cuda()) return {c10::ScalarType::BFloat16, "bf16: the GPU computes it natively"};
  if (!cpu_has_native_bf16()) return {c10::ScalarType::Float, "fp32: this CPU has no native bf16 (AMX or AVX512-BF16)"};
  if (batches.size() < 2) return {c10::ScalarType::Float, "fp32: too few batches to measure bf16 against"};
  int64_t batch_tokens = 0;
  for (const auto& b : batches) batch_tokens = std::max<int64_t>(batch_tokens, b.src.numel() + b.tgt_in.numel());
  const std::string key = ProbeCache::machine_key(torch::get_num_threads()) + "|train|" +
                          std::to_string(std::hash<std::string>{}(config.to_json())) + "|batch~" +
                          std::to_string((batch_tokens + 511) / 512 * 512);
  const ProbeCache cache("dtype-probe.tsv");
  if (auto hit = cache.get(key)) {
    const auto dtype = hit->value == "bf16" ? c10::ScalarType::BFloat16 : c10::ScalarType::Float;
    return {dtype, hit->value + ": measured earlier on this machine for this model (" + hit->note + "; " + cache.path() +
                       ")"};
  }
  // The probe draws dropout masks and initial weights: the run must not see that.
  at::Generator generator = at::globalContext().defaultGenerator(c10::Device(c10::kCPU));
  const at::Tensor rng_state = generator.get_state();
  const double fp32 = training_tokens_per_second(config, batches, device, c10::ScalarType::Float);
  const double bf16 = training_tokens_per_second(config, batches, device, c10::ScalarType::BFloat16);
  generator.set_state(rng_state);
  const bool use_bf16 = bf16 > kBf16Margin * fp32;
  char note[160];
  std::snprintf(note, sizeof(note), "fp32 %.0f vs bf16 %.0f target tokens/s over %zu batches, %.2fx", fp32, bf16,
                batches.size() - 1, bf16 / std::max(fp32, 1e-9));
  const std::string value = use_bf16 ? "bf16" : "fp32";
  cache.put(key, {value, note});
  return {use_bf16 ? c10::ScalarType::BFloat16 : c10::ScalarType::Float,
          value + ": measured now, the model's training step in both (" + note + ")"};
}

}  // namespace torchmt
