// torchmt clean: flags and/or a config file -> CleanOptions -> clean_corpus() (training/corpus_cleaning.h).
#include <iostream>

#include "training_command.h"
#include "torchmt/training/corpus_cleaning.h"
#include "torchmt/util/strings.h"

namespace torchmt::cli {
namespace {

int run_clean(int argc, char** argv) {
  const auto& table = clean_option_table();
  int code = kExitOk;
  auto line = parse_command_line(
      "Clean a parallel corpus with no trusted models: the corpus is cut into --folds parts, a forward and a\n"
      "backward model (the train command's options) train on the other parts of each, in OUT/fold<k>/, and each\n"
      "part is filtered by dual conditional cross-entropy under its own models (the filter command's options,\n"
      "--contrast on unless --contrast=false; the threshold, unless given, the validation pairs' 0.97\n"
      "quantile: --reference-quantile). A model never scores a pair it learned. With --rounds 2 or more, each later\n"
      "round trains its models on what the round before kept and filters every part again. A run that stopped\n"
      "goes on where it stopped; --max-minutes is the whole pipeline's budget.",
      table.rows(), argc, argv, code);
  if (!line) return code;
  auto options = read_training_options(table, *line, argv[0], code);
  if (!options) return code;
  // SIGINT/SIGTERM: the training in flight saved, exit 0
  auto hooks = training_process_hooks(argv[0], code);
  if (!hooks) return code;
  CleanSummary s;
  if (!check_usage([&] { s = clean_corpus(*options, *hooks); }, argv[0])) return kExitUsage;
  if (s.interrupted) {
    std::cerr << "interrupted: run the same command again to go on\n";
    return kExitOk;
  }
  const CorpusFilterOptions& f = options->filter;
  if (const std::string w = s.report.truncation_warning(f.src, f.tgt); !w.empty())
    std::cerr << argv[0] << ": warning: " << w << "\n";
  std::string thresholds;
  for (double t : s.thresholds) thresholds += (thresholds.empty() ? "" : ", ") + real_text(t);
  std::cerr << "clean: the parts' thresholds " << thresholds << "; models trained by this run " << s.trained
            << ", by an earlier one " << s.reused << "\n"
            << "clean: " << s.report.summary() << "\n";
  return kExitOk;
}

const CommandRegistration clean_registration(
    {"clean", "clean a parallel corpus with models trained on it, cross-fitted (no trusted models needed)", run_clean,
     37});

}  // namespace
}  // namespace torchmt::cli
