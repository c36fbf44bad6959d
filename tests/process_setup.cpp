// The test program owns its process: it points LibTorch's libraries at torchmt's instruction
// set (kernels/cpu_isa.h) and its GPU attention (util/device.h) before main, as the CLI does
// first thing, so that the tests see the CLI's arithmetic.
#include "kernels/cpu_isa.h"
#include "torchmt/util/device.h"

namespace {
[[maybe_unused]] const bool limited = [] {
  torchmt::kernels::limit_library_isas();
  torchmt::use_shape_free_cuda_attention();
  return true;
}();
}  // namespace
