// torchmt average: parameter averaging of checkpoints (Vaswani et al. average the last 5/20).
#include <iostream>

#include "cli_options.h"
#include "util/atomic_file.h"
#include "io/checkpoint.h"

namespace torchmt::cli {
namespace {

struct AverageCommandOptions {
  std::string output;
  std::vector<std::string> inputs;
};

const OptionTable<AverageCommandOptions>& average_option_table() {
  using O = AverageCommandOptions;
  static const auto table = OptionTable<O>("average")
      .add("output", &O::output, "averaged checkpoint to write", {"o", "", {}})
      .add("inputs", &O::inputs, "checkpoints to average (the arguments without a flag)");
  return table;
}

int run_average(int argc, char** argv) {
  int code = kExitOk;
  auto o = parse_options(average_option_table(),
                         "Average the parameters of checkpoints of one run: torchmt average -o avg.pt a.pt b.pt ...",
                         argc, argv, code, "inputs");
  if (!o) return code;
  if (o->output.empty()) return usage_error(argv[0], "missing required option -o/--output");
  if (o->inputs.size() < 2) {
    std::cerr << argv[0] << ": give at least two checkpoints to average\n";
    return kExitUsage;
  }
  const auto& inputs = o->inputs;
  std::vector<NamedPath> named;
  for (const auto& input : inputs) named.emplace_back("input", input);
  if (auto clash = same_file_twice(named, {{"-o/--output", o->output}})) return usage_error(argv[0], *clash);
  auto averaged = average_checkpoints(inputs);
  save_checkpoint(o->output, averaged.model, nullptr, averaged.meta);
  std::cerr << "averaged " << inputs.size() << " checkpoints into " << o->output << "\n";
  return kExitOk;
}

const CommandRegistration average_registration({"average", "average the parameters of several checkpoints", run_average, 60});

}  // namespace
}  // namespace torchmt::cli
