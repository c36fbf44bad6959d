#pragma once
// An exponential moving average of the weights (Marian's --exponential-smoothing, Polyak
// averaging): after each update, ema = d * ema + (1 - d) * w with d = min(decay, (1 + n) / (10 + n))
// at the n-th update, so that the early average is not dominated by the random initial weights.
// Validation and checkpoint_best.pt may use it in place of the raw weights (trainer.cpp).
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torchmt {

class ExponentialMovingAverage {
 public:
  // `params`: the model's unique parameters; `shadow`: where the average lives (resized and
  // initialised to the weights when empty; a checkpoint's average otherwise).
  ExponentialMovingAverage(std::vector<at::Tensor> params, std::vector<at::Tensor>& shadow, double decay);
  // After update number `update` (1-based) has been applied to the parameters.
  void update(int64_t update);
  double decay_at(int64_t update) const;

  const std::vector<at::Tensor>& params() const { return params_; }
  const std::vector<at::Tensor>& average() const { return shadow_; }

 private:
  std::vector<at::Tensor> params_;
  std::vector<at::Tensor>& shadow_;
  double decay_;
};

// While alive, `params` hold `values` (another set of weights of the same model: the moving
// average, an average of checkpoints); the weights come back on destruction.
class ScopedWeights {
 public:
  ScopedWeights(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& values);
  ~ScopedWeights();
  ScopedWeights(const ScopedWeights&) = delete;
  ScopedWeights& operator=(const ScopedWeights&) = delete;

 private:
  std::vector<at::Tensor> params_, saved_;
};

}  // namespace torchmt
