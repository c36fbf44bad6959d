#pragma once
// `--dtype auto` by measurement (training: training/dtype_probe.h; translation:
// decoding/dtype_probe.h): bf16 where the device computes it natively and it is measured
// faster than fp32 here. A CPU with AVX512-BF16 but no AMX may run bf16 slower or faster than
// fp32, depending on the CPU (tools/bench/DECISIONS.md), and so may a GPU for a model
// small enough to be bound by kernel launches, so the caller's own work is timed in both, once
// per machine (and GPU model) and job shape, and the result kept (probe_cache.h).
#include <functional>
#include <string>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace torchmt {

struct DtypeChoice {
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::string reason;  // one line: what was measured, or why nothing needed to be
};

// `key`: what the measurement depends on besides the machine (the job's shape); `throughput`:
// units of work per second in a dtype; `unit`: what a unit is, for the reason ("target
// tokens/s"). Leaves the global CPU random state as it found it.
DtypeChoice choose_dtype_by_measuring(const c10::Device& device, const std::string& key,
                                      const std::function<double(c10::ScalarType)>& throughput,
                                      const std::string& unit);

}  // namespace torchmt
