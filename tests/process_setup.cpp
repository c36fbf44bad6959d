// The test program owns its process: it points LibTorch's libraries at torchmt's instruction
// set before main, as the CLI does first thing (kernels/cpu_isa.h), so that the tests see the
// CLI's arithmetic.
#include "kernels/cpu_isa.h"

namespace {
[[maybe_unused]] const bool limited = [] {
  torchmt::kernels::limit_library_isas();
  return true;
}();
}  // namespace
