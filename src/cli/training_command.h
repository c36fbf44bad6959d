#pragma once
// What the commands that train share (train, distill, clean): a named recipe's defaults under the
// file and the flags, the options read and validated, and the hooks of a run that owns its process.
#include <optional>

#include "cli_options.h"
#include "training/training_step.h"
#include "torchmt/training/train_recipes.h"
#include "torchmt/training/trainer.h"

namespace torchmt::cli {

// The options `line` gives over --recipe's defaults, validated; nullopt with `exit_code` set
// otherwise (a usage error, or --dump-config printed).
template <typename Options>
std::optional<Options> read_training_options(const OptionTable<Options>& table, CommandLine& line, const char* program,
                                             int& exit_code) {
  if (!check_usage([&] { line.config = with_recipe(line.config); }, program)) {
    exit_code = kExitUsage;
    return std::nullopt;
  }
  auto options = read_options(table, line, program, exit_code);
  if (!options) return std::nullopt;
  if (!check_usage([&] { options->validate(); }, program)) {
    exit_code = kExitUsage;
    return std::nullopt;
  }
  return options;
}

// SIGINT/SIGTERM save the run in flight and end it; the kernels' settings from the environment
// table (a bad value: nullopt, `exit_code` set).
inline std::optional<TrainHooks> training_process_hooks(const char* program, int& exit_code) {
  use_training_process_policy();  // the command owns its process
  TrainHooks hooks;
  hooks.stop_on_signals = true;
  if (!check_usage([&] { hooks.runtime = Runtime::from_environment(); }, program)) {
    exit_code = kExitUsage;
    return std::nullopt;
  }
  return hooks;
}

}  // namespace torchmt::cli
