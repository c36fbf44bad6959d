#include "training/dtype_probe.h"

#include <algorithm>
#include <chrono>
#include <functional>

#include <torch/torch.h>

#include "torchmt/data/special_ids.h"
#include "io/checkpoint.h"
#include "torchmt/model/transformer.h"
#include "training/adam_optimizer.h"
#include "training/label_smoothed_cross_entropy.h"
#include "training/training_step.h"

namespace torchmt {
namespace {

// Target tokens per second of the training step in `dtype` on batches[1..], after one step on
// batches[0].
double training_tokens_per_second(const ModelConfig& config, const std::vector<Batch>& batches,
                                  const c10::Device& device, c10::ScalarType dtype) {
  Transformer model(config);
  model->to(device);
  model->train();
  AdamOptimizer optimizer(unique_parameters(*model), AdamOptions{});
  TrainingStep step(model, optimizer, LabelSmoothedCrossEntropy(0.1, config.pad_id), device, dtype, 1.0);
  step.run({batches[0]}, 1e-4).wait();
  int64_t tokens = 0;
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 1; i < batches.size(); ++i) {
    step.run({batches[i]}, 1e-4).wait();
    tokens += batches[i].tgt_tokens;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(tokens) / std::max(seconds, 1e-9);
}

}  // namespace

DtypeChoice choose_training_dtype(const ModelConfig& config, const std::vector<Batch>& batches,
                                  const c10::Device& device) {
  if (batches.size() < 2) return {c10::ScalarType::Float, "fp32: too few batches to measure bf16 against"};
  int64_t batch_tokens = 0;
  for (const auto& b : batches) batch_tokens = std::max<int64_t>(batch_tokens, b.src.numel() + b.tgt_in.numel());
  const std::string key = "train|" + std::to_string(std::hash<std::string>{}(config.to_json())) + "|batch~" +
                          std::to_string((batch_tokens + 511) / 512 * 512);
  return choose_dtype_by_measuring(
      device, key, [&](c10::ScalarType dtype) { return training_tokens_per_second(config, batches, device, dtype); },
      "target tokens/s in the model's training step");
}

}  // namespace torchmt
