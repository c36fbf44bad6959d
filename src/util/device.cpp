#include "torchmt/util/device.h"

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <utility>

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include "util/environment.h"

#define TORCHMT_DEVICE_GENERIC_AUTOCAST (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))
#define TORCHMT_HAS_CUDNN_SDPA TORCHMT_DEVICE_GENERIC_AUTOCAST  // the cuDNN SDPA switch: LibTorch 2.4+

namespace torchmt {

// SDPA's cuDNN backend builds an execution plan for every new shape. Decoding steps change
// shape every step (the key length grows, finished rows leave the batch), and so does
// training on length-bucketed batches: the plans cost more than the attention itself.
void use_shape_free_cuda_attention() {
#if TORCHMT_HAS_CUDNN_SDPA
  if (!env_flag("TORCHMT_CUDNN_SDPA", false)) at::globalContext().setSDPUseCuDNN(false);
#endif
}

c10::Device resolve_device(const std::string& spec, int default_index) {
  c10::Device device(c10::kCPU);
  if (spec == "auto" && !torch::cuda::is_available()) return device;
  try {
    device = spec == "auto" ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(default_index)) : c10::Device(spec);
  } catch (const std::exception&) {
    throw std::invalid_argument("invalid device '" + spec + "' (expected auto, cpu, cuda or cuda:N)");
  }
  if (device.is_cuda()) {
    if (!torch::cuda::is_available())
      throw std::runtime_error("device '" + spec + "' requested but this machine has no usable CUDA device");
    const int64_t index = device.has_index() ? device.index() : default_index;
    if (index >= static_cast<int64_t>(torch::cuda::device_count()))
      throw std::runtime_error("device '" + spec + "' does not exist (" + std::to_string(torch::cuda::device_count()) +
                               " CUDA devices)");
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  if (!device.is_cpu()) throw std::invalid_argument("unsupported device '" + spec + "'");
  return device;
}

bool cpu_has_native_bf16() {
  static const bool has = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("flags", 0) == 0)
        return line.find(" amx_bf16") != std::string::npos || line.find(" avx512_bf16") != std::string::npos;
    }
    return false;
  }();
  return has;
}

namespace {
// The fixed dtypes by name ("auto" is resolved apart).
const std::pair<const char*, c10::ScalarType> kDtypeSpellings[] = {
    {"fp32", c10::ScalarType::Float},     {"float32", c10::ScalarType::Float},
    {"bf16", c10::ScalarType::BFloat16},  {"bfloat16", c10::ScalarType::BFloat16},
    {"fp16", c10::ScalarType::Half},      {"float16", c10::ScalarType::Half}};
}  // namespace

bool is_dtype_spelling(const std::string& spec) {
  if (spec == "auto") return true;
  for (const auto& [name, type] : kDtypeSpellings)
    if (spec == name) return true;
  return false;
}

c10::ScalarType resolve_dtype(const std::string& spec, const c10::Device& device) {
  for (const auto& [name, type] : kDtypeSpellings)
    if (spec == name) return type;
  if (spec == "auto") {
    if (device.is_cuda() || cpu_has_native_bf16()) return c10::ScalarType::BFloat16;
    return c10::ScalarType::Float;
  }
  throw std::invalid_argument("invalid dtype '" + spec + "' (expected auto, fp32, bf16 or fp16)");
}

std::string dtype_name(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::BFloat16: return "bf16";
    case c10::ScalarType::Half: return "fp16";
    default: return "fp32";
  }
}


void check_training_dtype(c10::ScalarType dtype, const c10::Device& device) {
  if (dtype == c10::ScalarType::Half && !device.is_cuda())
    throw std::invalid_argument("--dtype fp16 trains on CUDA only (with dynamic loss scaling); on the CPU use bf16 or fp32");
}

c10::ScalarType active_autocast_dtype(const c10::Device& device) {
#if TORCHMT_DEVICE_GENERIC_AUTOCAST
  if (!at::autocast::is_autocast_enabled(device.type())) return c10::ScalarType::Float;
  return at::autocast::get_autocast_dtype(device.type());
#else
  if (device.is_cuda()) return at::autocast::is_enabled() ? at::autocast::get_autocast_gpu_dtype() : c10::ScalarType::Float;
  return at::autocast::is_cpu_enabled() ? at::autocast::get_autocast_cpu_dtype() : c10::ScalarType::Float;
#endif
}

AutocastGuard::AutocastGuard(const c10::Device& device, c10::ScalarType dtype) : device_type_(device.type()) {
  if (dtype == c10::ScalarType::Float) return;
  active_ = true;
#if TORCHMT_DEVICE_GENERIC_AUTOCAST
  previous_enabled_ = at::autocast::is_autocast_enabled(device_type_);
  previous_dtype_ = at::autocast::get_autocast_dtype(device_type_);
  at::autocast::set_autocast_enabled(device_type_, true);
  at::autocast::set_autocast_dtype(device_type_, dtype);
#else
  if (device_type_ == c10::kCUDA) {
    previous_enabled_ = at::autocast::is_enabled();
    previous_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_enabled(true);
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    previous_enabled_ = at::autocast::is_cpu_enabled();
    previous_dtype_ = at::autocast::get_autocast_cpu_dtype();
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#if TORCHMT_DEVICE_GENERIC_AUTOCAST
  at::autocast::set_autocast_enabled(device_type_, previous_enabled_);
  at::autocast::set_autocast_dtype(device_type_, previous_dtype_);
#else
  if (device_type_ == c10::kCUDA) {
    at::autocast::set_enabled(previous_enabled_);
    at::autocast::set_autocast_gpu_dtype(previous_dtype_);
  } else {
    at::autocast::set_cpu_enabled(previous_enabled_);
    at::autocast::set_autocast_cpu_dtype(previous_dtype_);
  }
#endif
}

}  // namespace torchmt
