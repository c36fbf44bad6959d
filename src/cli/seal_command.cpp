// torchmt seal: adds the checksum to checkpoints and exports written by torchmt 0.2 or earlier
// (torchmt refuses to load a file it cannot verify).
#include <iostream>

#include "cli_options.h"
#include "torchmt/loading/model_loader.h"

namespace torchmt::cli {
namespace {

struct SealCommandOptions {
  std::vector<std::string> inputs;
};

const OptionTable<SealCommandOptions>& seal_option_table() {
  using O = SealCommandOptions;
  static const auto table = OptionTable<O>("seal").add(
      "inputs", &O::inputs, "checkpoints (.pt) or exports (.ts) to seal (the arguments without a flag)");
  return table;
}

int run_seal(int argc, char** argv) {
  int code = kExitOk;
  auto o = parse_options(seal_option_table(),
                         "Check that old checkpoints or exports load, then add the checksum torchmt verifies on "
                         "every load: torchmt seal a.pt b.ts ...",
                         argc, argv, code, "inputs");
  if (!o) return code;
  if (o->inputs.empty()) return usage_error(argv[0], "give the checkpoints or exports to seal");
  for (const auto& path : o->inputs) {
    const SealOutcome outcome = seal_model_file(path);
    std::cerr << path << (outcome == SealOutcome::kSealed ? ": loads; sealed\n" : ": already sealed; verified\n");
  }
  return kExitOk;
}

const CommandRegistration seal_registration({"seal", "add the checksum to checkpoints and exports of torchmt 0.2", run_seal,
                                        75});

}  // namespace
}  // namespace torchmt::cli
