#pragma once
// Static int8 calibration (reference 002's static quantization: qconfig -> prepare -> calibrate
// -> convert): the model translates sample source sentences (greedy, fp32) while every Linear's
// input is observed; each layer's range is then max|x| over all of them and whether any input was
// negative (the MinMax observer). The ranges key ExportOptions::activation_ranges: the ONNX export
// writes scale max|x| / 127 (symmetric int8), torchmt's int8 kernels quantize over the range.
#include <map>
#include <string>
#include <vector>

#include "model/linear.h"

namespace torchmt {

struct LoadedCheckpoint;

struct CalibrationResult {
  std::map<std::string, ActivationRange> ranges;  // "<layer>.weight" (e.g. fc_out.weight) -> input range
  int64_t sentences = 0, source_tokens = 0, target_tokens = 0;
};

// `sentences`: source lines (blank lines are skipped; at least one must remain, else
// std::invalid_argument). Runs on the CPU, on the calling thread.
CalibrationResult calibrate_activation_ranges(const LoadedCheckpoint& checkpoint,
                                              const std::vector<std::string>& sentences);

}  // namespace torchmt
