// torchmt average: parameter averaging of checkpoints (Vaswani et al. average the last 5/20).
#include <iostream>

#include "cli_options.h"
#include "torchmt/io/checkpoint.h"

namespace torchmt::cli {
namespace {

int run_average(int argc, char** argv) {
  cxxopts::Options options(argv[0], "Average the parameters of checkpoints of one run: torchmt average -o avg.pt a.pt b.pt ...");
  options.add_options()("o,output", "averaged checkpoint to write", cxxopts::value<std::string>())(
      "inputs", "checkpoints", cxxopts::value<std::vector<std::string>>());
  options.parse_positional({"inputs"});
  options.positional_help("CHECKPOINT...");
  int code = kExitOk;
  auto r = parse_flags(options, argc, argv, code);
  if (!r) return code;
  if (!require_flag(*r, "output", argv[0])) return kExitUsage;
  if (!r->count("inputs") || (*r)["inputs"].as<std::vector<std::string>>().size() < 2) {
    std::cerr << argv[0] << ": give at least two checkpoints to average\n";
    return kExitUsage;
  }
  const auto inputs = (*r)["inputs"].as<std::vector<std::string>>();
  auto averaged = average_checkpoints(inputs);
  save_checkpoint((*r)["output"].as<std::string>(), averaged.model, nullptr, averaged.meta);
  std::cerr << "averaged " << inputs.size() << " checkpoints into " << (*r)["output"].as<std::string>() << "\n";
  return kExitOk;
}

const CommandRegistration registration({"average", "average the parameters of several checkpoints", run_average, 60});

}  // namespace
}  // namespace torchmt::cli
