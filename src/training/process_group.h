#pragma once
// Data-parallel training's process group on LibTorch's c10d (the engine under PyTorch's
// torch.distributed): a TCPStore rendezvous at MASTER_ADDR:MASTER_PORT, a Gloo backend for
// CPU tensors and, on a CUDA device in a build with NCCL (a CUDA LibTorch), an NCCL backend
// for CUDA tensors, as PyTorch's "cpu:gloo,cuda:nccl"; without NCCL, CUDA tensors are staged
// through the host and reduced by Gloo. Every collective has the
// group's timeout: a worker that died or hangs ends the job with a DistributedError naming
// this rank and the operation, never a silent hang. c10d stays behind this header.
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace torchmt {

// The torchrun variables: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT. `present` is false when WORLD_SIZE is not set (a single process).
struct DistributedEnv {
  bool present = false;
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // Throws std::invalid_argument naming the variable when one is malformed or inconsistent.
  static DistributedEnv from_environment();
};

class DistributedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Whether this build can make a process group (LibTorch's Gloo headers were found).
bool distributed_available();
// Whether this build reduces CUDA tensors with NCCL (a CUDA LibTorch with c10d's NCCL backend
// and nccl.h at build time).
bool nccl_available();

class ProcessGroup {
 public:
  // Joins the group (rank 0 hosts the store); waits up to `timeout` for every rank. On a CUDA
  // `device`, CUDA tensors go through NCCL where the build has it, unless the environment
  // variable TORCHMT_DIST_BACKEND=gloo asks for Gloo alone (for comparisons).
  ProcessGroup(const DistributedEnv& env, std::chrono::milliseconds timeout, c10::Device device = c10::kCPU);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // "Gloo", or "NCCL + Gloo" (NCCL for CUDA tensors), for the log.
  const std::string& backend() const { return backend_; }

  // An all-reduce (sum) in flight; wait() returns when `tensor` holds the sum of every rank's.
  class Pending {
   public:
    Pending();
    Pending(Pending&&) noexcept;
    Pending& operator=(Pending&&) noexcept;
    ~Pending();
    void wait();

   private:
    friend class ProcessGroup;
    struct Work;
    std::unique_ptr<Work> work_;
  };
  // `what` names the operation in errors ("gradient all-reduce").
  Pending all_reduce_sum_async(at::Tensor tensor, const char* what);
  void all_reduce_sum(at::Tensor tensor, const char* what) { all_reduce_sum_async(std::move(tensor), what).wait(); }
  // Every rank's `tensors` become root's.
  void broadcast(std::vector<at::Tensor> tensors, int root);
  // Every rank's `bytes` become root's (a file's contents, for ranks on other machines).
  void broadcast_bytes(std::string& bytes, int root);
  // Waits for every rank, up to `timeout` (the group's when zero).
  void barrier(std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // True when every rank passes true (a logical AND over the group: one small all-reduce).
  bool all_true(bool value);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, size_ = 1;
  std::chrono::milliseconds timeout_;
  std::string backend_ = "Gloo";
};

}  // namespace torchmt
