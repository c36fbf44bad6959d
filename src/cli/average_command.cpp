// torchmt average: parameter averaging of checkpoints (Vaswani et al. average the last 5/20).
#include <iostream>

#include <torch/torch.h>

#include "cli_options.h"
#include "torchmt/training/checkpoint.h"

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
  auto first = load_checkpoint(inputs[0], torch::kCPU);
  torch::NoGradGuard no_grad;
  auto params = unique_parameters(*first.model);
  for (size_t i = 1; i < inputs.size(); ++i) {
    auto other = load_checkpoint(inputs[i], torch::kCPU);
    if (other.meta.model.to_json() != first.meta.model.to_json())
      throw std::runtime_error(inputs[i] + " has a different model shape than " + inputs[0]);
    auto other_params = unique_parameters(*other.model);
    for (size_t j = 0; j < params.size(); ++j) params[j].add_(other_params[j]);
  }
  for (auto& p : params) p.div_(static_cast<double>(inputs.size()));
  save_checkpoint((*r)["output"].as<std::string>(), first.model, nullptr, first.meta);
  std::cerr << "averaged " << inputs.size() << " checkpoints into " << (*r)["output"].as<std::string>() << "\n";
  return kExitOk;
}

const CommandRegistration registration({"average", "average the parameters of several checkpoints", run_average, 60});

}  // namespace
}  // namespace torchmt::cli
