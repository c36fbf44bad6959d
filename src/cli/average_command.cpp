// torchmt average: parameter averaging of checkpoints (Vaswani et al. average the last 5/20).
#include <iostream>

#include "cli_options.h"
#include "torchmt/io/checkpoint.h"

namespace torchmt::cli {
namespace {

struct AverageCommandOptions {
  std::string output;
  std::vector<std::string> inputs;
};

const OptionTable<AverageCommandOptions>& average_option_table() {
  static const OptionTable<AverageCommandOptions> table = [] {
    using O = AverageCommandOptions;
    OptionTable<O> t("average");
    t.add("output", &O::output, "averaged checkpoint to write", {"o", "", {}});
    t.add("inputs", &O::inputs, "checkpoints to average (the arguments without a flag)");
    return t;
  }();
  return table;
}

int run_average(int argc, char** argv) {
  cxxopts::Options options(argv[0], "Average the parameters of checkpoints of one run: torchmt average -o avg.pt a.pt b.pt ...");
  options.positional_help("CHECKPOINT...");
  int code = kExitOk;
  auto o = parse_options(options, average_option_table(), argc, argv, code, "inputs");
  if (!o) return code;
  if (o->output.empty()) {
    std::cerr << argv[0] << ": missing required option -o/--output (see --help)\n";
    return kExitUsage;
  }
  if (o->inputs.size() < 2) {
    std::cerr << argv[0] << ": give at least two checkpoints to average\n";
    return kExitUsage;
  }
  const auto& inputs = o->inputs;
  auto averaged = average_checkpoints(inputs);
  save_checkpoint(o->output, averaged.model, nullptr, averaged.meta);
  std::cerr << "averaged " << inputs.size() << " checkpoints into " << o->output << "\n";
  return kExitOk;
}

const CommandRegistration registration({"average", "average the parameters of several checkpoints", run_average, 60});

}  // namespace
}  // namespace torchmt::cli
