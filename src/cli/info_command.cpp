// torchmt info: what a preset builds, without training anything.
#include <iostream>

#include <torch/torch.h>

#include "cli_options.h"
#include "torchmt/model/transformer.h"

namespace torchmt::cli {

namespace {

int run_info(int argc, char** argv) {
  cxxopts::Options options(argv[0], "Print the configuration and parameter count of a model preset.");
  options.add_options()("preset", "tiny|small|base|big", cxxopts::value<std::string>()->default_value("base"))(
      "vocab-size", "joint vocabulary size", cxxopts::value<int64_t>()->default_value("8000"));
  int code = kExitOk;
  auto r = parse_flags(options, argc, argv, code);
  if (!r) return code;
  ModelConfig config = ModelConfig::preset((*r)["preset"].as<std::string>());
  config.src_vocab_size = config.tgt_vocab_size = (*r)["vocab-size"].as<int64_t>();
  Transformer model(config);
  std::cout << config.to_json() << "parameters: " << count_parameters(model) << "\n";
  return kExitOk;
}

const CommandRegistration registration({"info", "print a model preset's shape and parameter count", run_info, 90});

}  // namespace
}  // namespace torchmt::cli
