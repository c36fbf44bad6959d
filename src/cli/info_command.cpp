// torchmt info: what a preset builds, without training anything.
#include <iostream>

#include <torch/torch.h>

#include "../kernels/cpu_isa.h"
#include "cli_options.h"
#include "torchmt/model/transformer.h"
#include "util/environment.h"

namespace torchmt::cli {

namespace {

struct InfoCommandOptions {
  std::string preset = "base";
  int64_t vocab_size = 8000;
  bool environment = false;
};

const OptionTable<InfoCommandOptions>& info_option_table() {
  using O = InfoCommandOptions;
  static const auto table = OptionTable<O>("info")
      .add("preset", &O::preset, "tiny|small|base|big|paper-small|paper-base|modern-small|modern-base")
      .add("vocab_size", &O::vocab_size, "joint vocabulary size")
      .add("environment", &O::environment, "print the table of environment variables instead");
  return table;
}

int run_info(int argc, char** argv) {
  int code = kExitOk;
  auto o = parse_options(info_option_table(),
                         "Print the configuration and parameter count of a model preset, and the environment "
                         "variables set that change what torchmt does.",
                         argc, argv, code);
  if (!o) return code;
  if (o->environment) {
    for (const auto& v : environment_table())
      std::cout << v.name << "\t" << v.values << "\tdefault: " << v.default_value << "\t" << v.meaning << "\t("
                << v.reader << ")\n";
    return kExitOk;
  }
  ModelConfig config;
  if (!check_usage(
          [&] {
            config = ModelConfig::preset(o->preset);
            config.src_vocab_size = config.tgt_vocab_size = o->vocab_size;
            config.validate();
          },
          argv[0]))
    return kExitUsage;
  Transformer model(config);
  std::cout << config.to_json() << "parameters: " << count_parameters(model) << "\n";
  std::cout << "cpu kernels: " << kernels::cpu_isa_summary() << "\n";
  const auto set = environment_in_effect();
  std::cout << "environment:" << (set.empty() ? " none of torchmt's variables is set" : "") << "\n";
  for (const auto& line : set) std::cout << "  " << line << "\n";
  return kExitOk;
}

const CommandRegistration info_registration({"info", "print a model preset's shape and parameter count", run_info, 90});

}  // namespace
}  // namespace torchmt::cli
