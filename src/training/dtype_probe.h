#pragma once
// `train --dtype auto`: the model's own training step timed in fp32 and bf16 on a few of the
// run's batches (util/dtype_choice.h: once per machine and model shape).
#include <vector>

#include <c10/core/Device.h>

#include "data/token_batcher.h"
#include "torchmt/model/model_config.h"
#include "util/dtype_choice.h"

namespace torchmt {

// `batches`: at least 2 (the first warms up, the others are timed), on `device`. Uses a fresh
// model and optimizer; the global random state is left as it was, so the run draws the same
// dropout masks whether it measured or read the cache.
DtypeChoice choose_training_dtype(const ModelConfig& config, const std::vector<Batch>& batches,
                                  const c10::Device& device);

}  // namespace torchmt
