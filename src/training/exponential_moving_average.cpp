#include "training/exponential_moving_average.h"

#include <algorithm>
#include <stdexcept>

#include <ATen/ATen.h>
#include <torch/torch.h>

namespace torchmt {

ExponentialMovingAverage::ExponentialMovingAverage(std::vector<at::Tensor> params, std::vector<at::Tensor>& shadow,
                                                   double decay)
    : params_(std::move(params)), shadow_(shadow), decay_(decay) {
  if (!(decay > 0 && decay < 1)) throw std::invalid_argument("--ema-decay must be in (0, 1)");
  torch::NoGradGuard no_grad;
  if (shadow_.empty()) {
    for (const auto& p : params_) shadow_.push_back(p.detach().clone());
  }
  if (shadow_.size() != params_.size()) throw std::invalid_argument("weight average does not match the model");
}

double ExponentialMovingAverage::decay_at(int64_t update) const {
  const double n = static_cast<double>(std::max<int64_t>(update, 0));
  return std::min(decay_, (1 + n) / (10 + n));
}

void ExponentialMovingAverage::update(int64_t update) {
  torch::NoGradGuard no_grad;
  // ema += (1 - d) * (w - ema), one multi-tensor call.
  at::_foreach_lerp_(shadow_, params_, at::Scalar(1 - decay_at(update)));
}

ScopedWeights::ScopedWeights(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& values)
    : params_(params) {
  if (params.size() != values.size()) throw std::invalid_argument("weights do not match the model");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    saved_.push_back(params_[i].detach().clone());
    params_[i].copy_(values[i]);
  }
}

ScopedWeights::~ScopedWeights() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < saved_.size(); ++i) params_[i].copy_(saved_[i]);
}

}  // namespace torchmt
