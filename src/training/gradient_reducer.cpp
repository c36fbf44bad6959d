#include "training/gradient_reducer.h"

#include <chrono>

#include <torch/torch.h>

namespace torchmt {

GradientReducer::GradientReducer(std::vector<at::Tensor> params, ProcessGroup& group, int64_t bucket_bytes,
                                 bool overlap, int64_t first_bucket_bytes)
    : params_(std::move(params)), where_(params_.size()), seen_(params_.size(), false), group_(group),
      overlap_(overlap) {
  // Buckets from the last parameter to the first, cut when the next one would pass the cap
  // (a parameter larger than the cap gets a bucket of its own).
  Bucket current;
  int64_t current_bytes = 0;
  auto close = [&] {
    if (current.params.empty()) return;
    const auto& first = params_[current.params.front()];
    int64_t elements = 0;
    for (size_t i : current.params) {
      current.offsets.push_back(elements);
      elements += params_[i].numel();
    }
    current.flat = torch::zeros({elements}, first.options().requires_grad(false));  // [elements]
    for (size_t slot = 0; slot < current.params.size(); ++slot)
      where_[current.params[slot]] = {buckets_.size(), slot};
    buckets_.push_back(std::move(current));
    current = Bucket{};
    current_bytes = 0;
  };
  for (size_t i = params_.size(); i-- > 0;) {
    const auto& p = params_[i];
    const int64_t nbytes = p.numel() * static_cast<int64_t>(p.element_size());
    // One dtype and device per bucket (a flat tensor holds them all).
    const int64_t cap = buckets_.empty() && first_bucket_bytes > 0 ? first_bucket_bytes : bucket_bytes;
    if (!current.params.empty() && (current_bytes + nbytes > cap ||
                                     params_[current.params.front()].scalar_type() != p.scalar_type() ||
                                     params_[current.params.front()].device() != p.device()))
      close();
    current.params.push_back(i);
    current_bytes += nbytes;
    bytes_ += nbytes;
  }
  close();
  if (overlap_) {
    for (size_t i = 0; i < params_.size(); ++i)
      hooks_.push_back(params_[i].register_hook([this, i](const at::Tensor& grad) { on_gradient(i, grad); }));
  }
}

GradientReducer::~GradientReducer() {
  for (size_t i = 0; i < hooks_.size(); ++i) params_[i].remove_hook(hooks_[i]);
}

void GradientReducer::arm() {
  armed_ = true;
  next_launch_ = 0;
  std::fill(seen_.begin(), seen_.end(), false);
  for (auto& b : buckets_) {
    b.ready = 0;
    b.launched = false;
  }
}

// A hook runs before autograd adds `grad` into .grad, so the bucket gets .grad (earlier
// micro-batches of the update) + grad; finish() overwrites .grad with the reduced sum.
void GradientReducer::on_gradient(size_t param, const at::Tensor& grad) {
  if (!armed_ || seen_[param]) return;
  torch::NoGradGuard no_grad;
  seen_[param] = true;
  const auto [b, slot] = where_[param];
  Bucket& bucket = buckets_[b];
  const auto& p = params_[param];
  at::Tensor view = bucket.flat.narrow(0, bucket.offsets[slot], p.numel()).view(p.sizes());  // p's shape
  if (p.grad().defined())
    at::add_out(view, p.grad(), grad);
  else
    view.copy_(grad);
  if (++bucket.ready == bucket.params.size()) launch_ready();
}

// Buckets start strictly in order: every rank must issue the same collectives in the same order.
void GradientReducer::launch_ready() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].ready == buckets_[next_launch_].params.size()) {
    Bucket& b = buckets_[next_launch_++];
    b.pending = group_.all_reduce_sum_async(b.flat, "gradient all-reduce");
    b.launched = true;
  }
}

void GradientReducer::fill_missing(Bucket& b) {
  for (size_t slot = 0; slot < b.params.size(); ++slot) {
    const size_t i = b.params[slot];
    if (seen_[i]) continue;
    seen_[i] = true;
    at::Tensor view = b.flat.narrow(0, b.offsets[slot], params_[i].numel());
    if (params_[i].grad().defined())
      view.copy_(params_[i].grad().reshape({-1}));
    else
      view.zero_();
    ++b.ready;
  }
}

void GradientReducer::finish() {
  torch::NoGradGuard no_grad;
  if (!overlap_) arm();
  for (auto& b : buckets_) fill_missing(b);
  launch_ready();
  // Which parameters have a gradient on some rank after this update's backward passes. One
  // that has none anywhere keeps none, as DDP leaves globally unused parameters and as one
  // process would: the optimizer skips a parameter without .grad (a mixture's expert that no
  // token reached in this update), so it must not get a zero gradient here and an Adam step
  // one process would not give it.
  at::Tensor used = torch::zeros({static_cast<int64_t>(params_.size())}, torch::kFloat);  // [params]
  auto* used_flag = used.data_ptr<float>();
  for (size_t i = 0; i < params_.size(); ++i) used_flag[i] = params_[i].grad().defined() ? 1.0f : 0.0f;
  ProcessGroup::Pending used_pending = group_.all_reduce_sum_async(used, "gradient all-reduce (parameters used)");
  const auto start = std::chrono::steady_clock::now();
  for (auto& b : buckets_) b.pending.wait();
  used_pending.wait();
  wait_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (auto& b : buckets_)
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      auto& p = params_[b.params[slot]];
      at::Tensor sum = b.flat.narrow(0, b.offsets[slot], p.numel()).view(p.sizes());  // p's shape
      if (p.grad().defined())
        p.mutable_grad().copy_(sum);
      else if (used_flag[b.params[slot]] > 0)
        p.mutable_grad() = sum.clone();
    }
  armed_ = false;
}

}  // namespace torchmt
