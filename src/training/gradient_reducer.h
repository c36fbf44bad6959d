#pragma once
// Data-parallel gradient all-reduce in buckets (the design of PyTorch DDP's Reducer, on our
// own autograd hooks): parameters are grouped, in reverse registration order (roughly the
// order backward produces their gradients), into flat buckets of about `bucket_bytes`, the first
// (the earliest gradients) of `first_bucket_bytes` when given, as DDP's 1 MB first bucket: its
// all-reduce starts early in backward. With
// `overlap`, a hook on each parameter copies its gradient into its bucket as backward
// produces it, and a complete bucket's all-reduce starts at once, in bucket order on every
// rank, while backward goes on with the layers below. finish() waits and writes the sums
// back into the .grad tensors. Only the update's last micro-batch is reduced (arm() before
// its backward): accumulation steps communicate nothing, as DDP's no_sync().
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "training/process_group.h"

namespace torchmt {

class GradientReducer {
 public:
  GradientReducer(std::vector<at::Tensor> params, ProcessGroup& group, int64_t bucket_bytes, bool overlap,
                  int64_t first_bucket_bytes = 0);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Before the backward of an update's last micro-batch.
  void arm();
  // After it: launches what is left (all of it without overlap; buckets with parameters that
  // got no gradient), waits, and leaves every parameter's .grad = the sum over the ranks; a
  // parameter that has no gradient on any rank keeps none (DDP's globally unused parameters).
  void finish();

  int64_t buckets() const { return static_cast<int64_t>(buckets_.size()); }
  int64_t bytes() const { return bytes_; }            // per update and rank, sent to the all-reduce
  double last_wait_seconds() const { return wait_seconds_; }  // time finish() waited (not hidden)

 private:
  struct Bucket {
    std::vector<size_t> params;          // indices into params_
    std::vector<int64_t> offsets;        // each one's start in `flat`
    at::Tensor flat;                     // [elements] of the gradients' dtype and device
    size_t ready = 0;
    bool launched = false;
    ProcessGroup::Pending pending;
  };
  void on_gradient(size_t param, const at::Tensor& grad);
  void launch_ready();
  void fill_missing(Bucket& b);

  std::vector<at::Tensor> params_;
  std::vector<std::pair<size_t, size_t>> where_;  // param -> (bucket, slot)
  std::vector<bool> seen_;                        // param got its gradient in this backward
  std::vector<Bucket> buckets_;
  std::vector<unsigned> hooks_;
  ProcessGroup& group_;
  bool overlap_, armed_ = false;
  size_t next_launch_ = 0;
  int64_t bytes_ = 0;
  double wait_seconds_ = 0;
};

}  // namespace torchmt
