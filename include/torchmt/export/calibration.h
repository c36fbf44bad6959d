#pragma once
// Static int8 calibration (reference 002's static quantization: qconfig -> prepare -> calibrate
// -> convert): the model translates sample source sentences (greedy, fp32) while every Linear's
// input is observed; each layer's input scale is then max|x| / 127 over all of them (symmetric
// int8, zero point 0: the MinMax observer). The scales key ExportOptions::activation_scales.
#include <map>
#include <string>
#include <vector>

namespace torchmt {

struct LoadedCheckpoint;

struct CalibrationResult {
  std::map<std::string, float> scales;  // weight's state-dict name -> input scale
  int64_t sentences = 0, source_tokens = 0, target_tokens = 0;
};

// `sentences`: source lines (blank lines are skipped; at least one must remain, else
// std::invalid_argument). Runs on the CPU, on the calling thread.
CalibrationResult calibrate_activation_scales(const LoadedCheckpoint& checkpoint,
                                              const std::vector<std::string>& sentences);

}  // namespace torchmt
