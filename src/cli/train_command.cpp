// torchmt train: flags and/or a config file -> TrainOptions -> Trainer.
#include <filesystem>
#include <iostream>

#include "training_command.h"
#include "training/process_group.h"
#include "torchmt/training/train_recipes.h"
#include "torchmt/training/trainer.h"
#include "training/worker_launcher.h"
#include "training/training_step.h"
#include "util/integrity.h"

namespace torchmt::cli {
namespace {

int run_train(int argc, char** argv) {
  const auto& table = train_option_table();
  int code = kExitOk;
  auto line = parse_command_line("Train a Transformer translation model (flags override --config).", table.rows(),
                                 argc, argv, code);
  if (!line) return code;
  if (line->config.has("resume") && line->config.get_bool("resume") && !line->flags.count("config")) {
    // A resumed run continues with the configuration it was started with; flags given now override it.
    const std::string out = line->config.has("out") ? line->config.get("out") : TrainOptions().out;
    if (std::filesystem::exists(out + "/config.yaml")) {
      Seal seal = Seal::kVerified;
      FlatConfig saved = FlatConfig::load(out + "/config.yaml", &seal);
      if (seal == Seal::kAbsent)
        std::cerr << "warning: " << out << "/config.yaml carries no checksum (edited by hand, or written by "
                  << "torchmt 0.2 or earlier): read as it is\n";
      saved.merge(line->config);
      line->config = saved;
    }
  }
  auto train_options = read_training_options(table, *line, argv[0], code);
  if (!train_options) return code;
  use_training_process_policy();  // the command owns its process
  if (train_options->nproc_per_node > 1 && !DistributedEnv::from_environment().present) {
    // This process launches the workers, each of which runs this same command line.
    std::vector<std::string> args{"torchmt", "train"};
    args.insert(args.end(), argv + 1, argv + argc);
    return launch_local_workers(static_cast<int>(train_options->nproc_per_node), args);
  }
  TrainHooks hooks;
  hooks.stop_on_signals = true;  // SIGINT/SIGTERM: save and exit 0
  if (!check_usage([&] { hooks.runtime = Runtime::from_environment(); }, argv[0])) return kExitUsage;
  TrainSummary s = Trainer(*train_options).run(hooks);
  if (!s.reporting) return kExitOk;
  std::cerr << (s.interrupted ? "interrupted" : "done") << ": " << s.steps << " steps in this run, "
            << static_cast<int64_t>(s.train_seconds) << " s of training, " << static_cast<int64_t>(s.tokens_per_sec)
            << " target tokens/s";
  if (s.best_bleu >= 0) std::cerr << ", best validation BLEU " << s.best_bleu << " (" << s.best_checkpoint << ")";
  else if (s.interrupted && s.steps == 0) std::cerr << " (stopped before its first step)";
  std::cerr << "\n";
  return kExitOk;
}

const CommandRegistration train_registration({"train", "train a translation model from a parallel corpus", run_train, 20});

}  // namespace
}  // namespace torchmt::cli
