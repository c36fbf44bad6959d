#pragma once
// A bf16 CPU tensor's elements as the 16-bit patterns the vector kernels load and store
// (vector.h: load16_bf16, store16_bf16).
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace torchmt::kernels {

inline uint16_t* bf16_bits(const at::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>()); }

}  // namespace torchmt::kernels
