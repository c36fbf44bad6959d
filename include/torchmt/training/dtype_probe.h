#pragma once
// `train --dtype auto`: the precision that trains this model fastest on this machine, by
// measurement, not by CPU flags. A CPU with AVX512-BF16 but no AMX may run bf16 slower than
// fp32 (measured 0.67x on one such machine, 2x on another), so there the model's own training
// step is timed in both on a few of the run's batches, once per machine and model shape
// (util/probe_cache.h). CUDA: bf16; a CPU without native bf16: fp32.
#include <string>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "torchmt/data/token_batcher.h"
#include "torchmt/model/model_config.h"

namespace torchmt {

struct DtypeChoice {
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::string reason;  // one line: what was measured or why nothing was
};

// `batches`: at least 2 (the first warms up, the others are timed). Leaves the global random
// state as it found it: the run draws the same dropout masks whether it probed or read the cache.
DtypeChoice choose_training_dtype(const ModelConfig& config, const std::vector<Batch>& batches,
                                  const c10::Device& device);

}  // namespace torchmt
