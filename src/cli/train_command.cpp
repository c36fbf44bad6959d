// torchmt train: flags and/or a config file -> TrainOptions -> Trainer.
#include <filesystem>
#include <iostream>

#include "cli_options.h"
#include "torchmt/training/trainer.h"

namespace torchmt::cli {
namespace {

// flag name -> config key; every flag takes a value except the booleans listed below.
const std::vector<std::pair<std::string, std::string>>& value_flags() {
  static const std::vector<std::pair<std::string, std::string>> flags = {
      {"train-src", "training source file (plain or .gz)"},
      {"train-tgt", "training target file"},
      {"valid-src", "validation source file"},
      {"valid-tgt", "validation target file"},
      {"spm", "existing joint SentencePiece model (default: train one into the run dir)"},
      {"vocab-size", "BPE vocabulary size when training one (8000)"},
      {"max-len", "skip pairs with a side longer than this many tokens (256)"},
      {"preset", "model preset: tiny|small|base|big (small)"},
      {"d-model", "override d_model"},
      {"num-heads", "override the number of attention heads"},
      {"encoder-layers", "override encoder layers"},
      {"decoder-layers", "override decoder layers"},
      {"d-ff", "override the feed-forward size"},
      {"dropout", "override dropout"},
      {"activation", "relu|gelu"},
      {"tie-embeddings", "auto|true|false (auto: the preset's choice)"},
      {"max-tokens", "source+target tokens per batch incl. padding (4096)"},
      {"update-freq", "accumulate gradients over N batches (1)"},
      {"max-epochs", "stop after N epochs (0 = no limit)"},
      {"max-steps", "stop after N updates (0 = no limit)"},
      {"max-minutes", "stop after N minutes of training (0 = no limit)"},
      {"lr-factor", "learning-rate factor of the paper's schedule (1.0)"},
      {"warmup", "warm-up steps (4000)"},
      {"label-smoothing", "label smoothing epsilon (0.1)"},
      {"clip-norm", "gradient clipping max norm, 0 = off (1.0)"},
      {"max-bad-steps", "non-finite steps in a row before stopping (5)"},
      {"seed", "random seed (1)"},
      {"device", "auto|cpu|cuda|cuda:N (auto)"},
      {"dtype", "auto|fp32|bf16 (auto: bf16 where the hardware has it)"},
      {"threads", "CPU threads, 0 = all cores (0)"},
      {"out", "run directory (runs/default)"},
      {"validate-every", "validate every N steps, 0 = every epoch (0)"},
      {"log-every", "steps between log lines when not on a terminal (100)"},
      {"keep-last", "numbered checkpoints to keep (3)"},
      {"valid-batch-size", "sentences per batch when decoding the validation set (128)"},
  };
  return flags;
}

std::string config_key(std::string flag) {
  for (auto& c : flag)
    if (c == '-') c = '_';
  return flag;
}

int run_train(int argc, char** argv) {
  cxxopts::Options options(argv[0], "Train a Transformer translation model (flags override --config).");
  options.add_options()("config", "YAML or JSON file of options (keys as flags, with _ for -)",
                        cxxopts::value<std::string>())("resume", "continue RUN_DIR/checkpoint_last.pt exactly");
  for (const auto& [flag, help] : value_flags()) options.add_options()(flag, help, cxxopts::value<std::string>());
  int code = kExitOk;
  auto r = parse_flags(options, argc, argv, code);
  if (!r) return code;

  FlatConfig config;
  const bool resume = r->count("resume") > 0;
  if (r->count("config")) {
    config = FlatConfig::load((*r)["config"].as<std::string>());
  } else if (resume) {
    // A resumed run continues with the configuration it was started with.
    const std::string out = r->count("out") ? (*r)["out"].as<std::string>() : TrainOptions().out;
    if (std::filesystem::exists(out + "/config.yaml")) config = FlatConfig::load(out + "/config.yaml");
  }
  for (const auto& [flag, help] : value_flags())
    if (r->count(flag)) config.set(config_key(flag), (*r)[flag].as<std::string>());
  config.set("resume", resume ? "true" : "false");

  TrainOptions train_options;
  try {
    train_options = TrainOptions::from_config(config);
  } catch (const std::invalid_argument& e) {
    std::cerr << argv[0] << ": " << e.what() << " (see --help)\n";
    return kExitUsage;
  }
  TrainSummary s = Trainer(train_options).run();
  std::cerr << (s.interrupted ? "interrupted" : "done") << ": " << s.steps << " steps in this run, "
            << static_cast<int64_t>(s.train_seconds) << " s of training, " << static_cast<int64_t>(s.tokens_per_sec)
            << " target tokens/s, best validation BLEU " << s.best_bleu << " (" << s.best_checkpoint << ")\n";
  return kExitOk;
}

const CommandRegistration registration({"train", "train a translation model from a parallel corpus", run_train, 20});

}  // namespace
}  // namespace torchmt::cli
