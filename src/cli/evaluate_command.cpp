// torchmt evaluate: sacreBLEU-exact corpus BLEU and chrF of a hypothesis file against a reference.
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <iostream>

#include "cli_options.h"
#include "torchmt/util/strings.h"
#include "evaluation/report.h"
#include "evaluation/utf8_line_reader.h"
#include "util/atomic_file.h"
#include "util/progress.h"
#include "torchmt/decoding/reverse_rescoring.h"
#include "torchmt/decoding/translation_options.h"
#include "torchmt/loading/model_loader.h"
#include "util/heap.h"

namespace torchmt::cli {

namespace {

struct EvaluateCommandOptions {
  std::string hyp, src, ref, save_hyp;
  bool quiet = false;
  TranslatorConfig translator;
  ReverseRescoring rescoring;
};

const OptionTable<EvaluateCommandOptions>& evaluate_option_table() {
  using O = EvaluateCommandOptions;
  static const auto table = OptionTable<O>("evaluate")
      .add("hyp", &O::hyp, "hypothesis file, one sentence per line (plain or .gz)", {"", "scoring", {}})
      .add("src", &O::src, "source file to translate with -m (plain or .gz)", {"", "scoring", {}})
      .add("ref", &O::ref, "reference file, line i translating the same source as hypothesis line i",
           {"", "scoring", {}})
      .add("save_hyp", &O::save_hyp, "with -m: also write the translations to this file", {"", "scoring", {}})
      .add("quiet", &O::quiet, "no progress on stderr while translating", {"q", "scoring", {}})
      .include(translator_option_table(), &O::translator)
      .include(reverse_rescoring_option_table(), &O::rescoring);
  return table;
}

int run_evaluate(int argc, char** argv) {
  int code = kExitOk;
  auto o = parse_options(evaluate_option_table(),
                         "Score translations against a reference with corpus BLEU and chrF, computed exactly as "
                         "sacreBLEU 2.6.0 does by default (13a tokenization, cased). Either score an existing "
                         "--hyp file, or translate --src with -m MODEL first.",
                         argc, argv, code);
  if (!o) return code;
  use_heap_policy(o->translator.translation);  // before the load and the workers start
  if (o->ref.empty()) return usage_error(argv[0], "missing required option --ref");
  const bool translate_first = !o->translator.models.empty();
  if (translate_first == !o->hyp.empty())
    return usage_error(argv[0], "give either --hyp FILE, or -m MODEL with --src FILE");
  if (translate_first && o->src.empty()) return usage_error(argv[0], "missing required option --src");
  if (!translate_first && !o->save_hyp.empty())
    return usage_error(argv[0], "--save-hyp saves the translations of -m MODEL (with --hyp there are none to save)");
  if (auto clash = same_file_twice(translator_inputs(o->translator, {{"--src", o->src}, {"--ref", o->ref},
                                                                     {"--reverse-model", o->rescoring.reverse_model}}),
                                   {{"--save-hyp", o->save_hyp}}))
    return usage_error(argv[0], *clash);
  if (const auto dir = std::filesystem::path(o->save_hyp).parent_path(); !o->save_hyp.empty() && !dir.empty() &&
                                                                          !std::filesystem::is_directory(dir))
    return usage_error(argv[0], "--save-hyp '" + o->save_hyp + "': no directory " + dir.string());
  o->translator.translation.search.scores = false;  // BLEU and chrF read the texts only
  const std::string hyp_path = translate_first ? o->src : o->hyp;
  const std::string ref_path = o->ref;
  std::unique_ptr<Translator> translator, reverse;
  if (!translate_first && o->rescoring.enabled()) return usage_error(argv[0], "--reverse-weight needs -m MODEL with --src FILE");
  if (translate_first && !check_usage(
                             [&] {
                               translator = std::make_unique<Translator>(load_cli_translator(o->translator));
                               reverse = load_reverse_translator(o->rescoring, o->translator, *translator);
                             },
                             argv[0]))
    return kExitUsage;
  if (translator && !translator->dtype_reason().empty()) std::cerr << "dtype auto: " << translator->dtype_reason() << "\n";

  std::vector<std::string> hyps, refs;
  try {
    hyps = evaluation::read_utf8_lines(hyp_path);  // the sources, when translating first
    refs = evaluation::read_utf8_lines(ref_path);
  } catch (const std::exception& e) {
    std::cerr << argv[0] << ": error: " << escape_control(e.what()) << "\n";
    return kExitFailure;
  }
  if (hyps.size() != refs.size()) {
    // A shifted or truncated hypothesis file would score silently wrong: refuse it.
    std::cerr << argv[0] << ": line counts differ: " << (translate_first ? "source" : "hypothesis") << " file " << hyp_path << " has " << hyps.size()
              << " lines, reference file " << ref_path << " has " << refs.size() << " lines\n";
    return kExitFailure;
  }
  if (refs.empty()) {  // (sacreBLEU refuses it too: a score of nothing is no score)
    std::cerr << argv[0] << ": error: " << ref_path << " holds no lines: nothing to score\n";
    return kExitFailure;
  }
  if (translate_first) {
    std::vector<std::string> translated;
    Progress progress("evaluate: translate", "lines", static_cast<int64_t>(hyps.size()),
                      o->quiet ? ProgressStyle::kQuiet : ProgressStyle::kAuto);
    for (auto& t : translate_rescored(*translator, reverse ? *reverse : *translator, o->rescoring.weight, hyps,
                                      o->translator.translation, [&progress](int64_t n) { progress.add(n); }))
      translated.push_back(std::move(t.texts.front()));
    progress.finish();
    hyps = std::move(translated);
    if (!o->save_hyp.empty()) {
      std::string text;
      for (const auto& h : hyps) text += h + "\n";
      atomic_write(o->save_hyp, text);
    }
  }
  return evaluation::score_and_print(hyps, refs, std::cout);
}

const CommandRegistration evaluate_registration({"evaluate", "corpus BLEU and chrF of a hypothesis file (sacreBLEU-exact)",
                                        run_evaluate, 40});

}  // namespace
}  // namespace torchmt::cli
