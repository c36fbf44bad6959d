#pragma once
// Device and precision selection shared by train, translate and the benchmarks.
#include <string>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace torchmt {

// "auto" (CUDA when present, else CPU), "cpu", "cuda", "cuda:N". Throws a one-line error
// for a malformed spec or a CUDA device that this machine does not have.
// `default_index`: the GPU that "auto" and "cuda" (no index) mean: a data-parallel worker's
// LOCAL_RANK, one GPU per worker.
c10::Device resolve_device(const std::string& spec, int default_index = 0);

// Process policy for the program that owns the process (the CLI calls it first thing; the
// library never does, so an embedding program keeps its own ATen setting): turns off SDPA's
// cuDNN backend on GPUs, whose per-shape plans make decoding slow, unless TORCHMT_CUDNN_SDPA=1.
void use_shape_free_cuda_attention();

// "fp32", "bf16", "fp16" or "auto" (bf16 where the device computes it natively: CUDA, or
// a CPU with AMX / AVX512-BF16; fp32 otherwise). This is only the starting guess: the
// commands resolve "auto" on a GPU or a CPU with native bf16 by measuring both (dtype_choice.h).
c10::ScalarType resolve_dtype(const std::string& spec, const c10::Device& device);
// Whether resolve_dtype takes `spec` (its names and their long forms, "float32", ...).
bool is_dtype_spelling(const std::string& spec);
std::string dtype_name(c10::ScalarType dtype);

// True when this CPU has native bf16 matrix instructions (AMX or AVX512_BF16).
bool cpu_has_native_bf16();

// Throws std::invalid_argument unless `dtype` can train on `device`: fp16 needs CUDA (its
// dynamic loss scaling runs there: torchmt/training/training_step.h); fp32 and bf16 train
// everywhere.
void check_training_dtype(c10::ScalarType dtype, const c10::Device& device);

// The lower-precision dtype autocast on `device` is casting matmul inputs to right now, or
// Float when autocast is off there (for code that computes a linear layer outside the
// dispatcher, and for recomputing a layer as its forward pass ran: activation_checkpoint.h).
c10::ScalarType active_autocast_dtype(const c10::Device& device);

// Enables autocast to `dtype` on `device` for its lifetime (no-op for fp32); restores the
// previous state on exit. Works across LibTorch 2.1 .. 2.13 autocast APIs.
class AutocastGuard {
 public:
  AutocastGuard(const c10::Device& device, c10::ScalarType dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType device_type_;
  bool previous_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::ScalarType::Float;
};

}  // namespace torchmt
