// torchmt confidence: how well the model's confidence tells good translations from bad ones, and
// its calibration. Translates --src, estimates each sentence's and word's confidence, compares
// them with --ref (sentence chrF; whether each word appears in the reference) and prints Spearman's
// rho and the word-level ROC AUC, for the raw estimate and for a calibration (--calibration, or the
// one --fit writes from these pairs).
#include <iostream>
#include <memory>
#include <optional>

#include "cli_options.h"
#include "torchmt/util/strings.h"
#include "util/atomic_file.h"
#include "torchmt/decoding/confidence.h"
#include "torchmt/decoding/translation_options.h"
#include "evaluation/confidence_fit.h"
#include "evaluation/utf8_line_reader.h"
#include "torchmt/loading/model_loader.h"
#include "util/progress.h"

namespace torchmt::cli {
namespace {

struct ConfidenceCommandOptions {
  TranslatorConfig translator;
  std::string src, ref, fit, calibration;
  bool quiet = false;
};

const OptionTable<ConfidenceCommandOptions>& confidence_option_table() {
  using O = ConfidenceCommandOptions;
  static const auto table = OptionTable<O>("confidence")
      .add("src", &O::src, "source sentences to translate (plain or .gz)", {"", "confidence", {}})
      .add("ref", &O::ref, "their reference translations, line for line", {"", "confidence", {}})
      .add("fit", &O::fit,
           "fit a calibration on these pairs (held-out data, never the test set) and write it to this file, "
           "for translate --confidence-model",
           {"", "confidence", {}})
      .add("calibration", &O::calibration, "a calibration --fit wrote: measure it too", {"", "confidence", {}})
      .add("quiet", &O::quiet, "no progress on stderr", {"q", "confidence", {}})
      .include(translator_option_table(), &O::translator);
  return table;
}

void print_quality(const std::string& what, const ConfidenceQuality& q) {
  std::cout << what << ": sentence Spearman(confidence, chrF) " << q.sentence_spearman
            << ", word ROC AUC(not in the reference) " << q.word_auc << " (" << q.sentences << " sentences, "
            << q.words << " words, " << q.words_not_in_reference << " not in the reference)\n";
}

int run_confidence(int argc, char** argv) {
  int code = kExitOk;
  auto o = parse_options(confidence_option_table(),
                         "Measure (and calibrate) the confidence estimate of translate --confidence against "
                         "references: Spearman's rho of sentence confidence and sentence chrF, and the ROC AUC of "
                         "word doubt for the words that do not appear in the reference.",
                         argc, argv, code);
  if (!o) return code;
  if (o->src.empty()) return usage_error(argv[0], "missing required option --src");
  if (o->ref.empty()) return usage_error(argv[0], "missing required option --ref");
  if (auto clash = same_file_twice(translator_inputs(o->translator, {{"--src", o->src}, {"--ref", o->ref},
                                                                     {"--calibration", o->calibration}}),
                                   {{"--fit", o->fit}}))
    return usage_error(argv[0], *clash);
  std::optional<ConfidenceModel> calibration;
  if (!o->calibration.empty() &&
      !check_usage([&] { calibration = ConfidenceModel::load(o->calibration); }, argv[0]))
    return kExitUsage;
  std::vector<std::string> sources, refs;
  try {
    sources = evaluation::read_utf8_lines(o->src);
    refs = evaluation::read_utf8_lines(o->ref);
  } catch (const std::exception& e) {
    std::cerr << argv[0] << ": error: " << escape_control(e.what()) << "\n";
    return kExitFailure;
  }
  if (sources.size() != refs.size()) {
    std::cerr << argv[0] << ": line counts differ: " << o->src << " has " << sources.size() << " lines, " << o->ref
              << " has " << refs.size() << "\n";
    return kExitFailure;
  }
  if (sources.empty()) {
    std::cerr << argv[0] << ": error: " << o->src << " holds no lines: nothing to measure\n";
    return kExitFailure;
  }
  o->translator.translation.search.scores = false;
  std::unique_ptr<Translator> translator;
  if (!check_usage([&] { translator = std::make_unique<Translator>(load_cli_translator(o->translator)); }, argv[0]))
    return kExitUsage;
  Progress progress("confidence: translate", "lines", static_cast<int64_t>(sources.size()),
                    o->quiet ? ProgressStyle::kQuiet : ProgressStyle::kAuto);
  const auto translations =
      translator->translate(sources, o->translator.translation, [&progress](int64_t n) { progress.add(n); });
  progress.finish();
  LineSample cut, blank;
  for (size_t i = 0; i < translations.size(); ++i) {
    if (translations[i].truncated) cut.add(static_cast<int64_t>(i) + 1);
    if (Translator::is_blank(sources[i])) blank.add(static_cast<int64_t>(i) + 1);
  }
  if (cut.count() > 0)
    std::cerr << argv[0] << ": warning: " << cut.count() << (cut.count() == 1 ? " source line" : " source lines")
              << " longer than the model accepts, translated cut: " << cut.describe() << " of " << o->src << "\n";
  if (blank.count() > 0)
    std::cerr << argv[0] << ": warning: " << blank.count() << (blank.count() == 1 ? " blank source line" : " blank source lines")
              << " (no words to rate) left out of the measures: " << blank.describe() << " of " << o->src << "\n";
  if (blank.count() == static_cast<int64_t>(sources.size())) {
    std::cerr << argv[0] << ": error: every line of " << o->src << " is blank: nothing to measure\n";
    return kExitFailure;
  }
  std::vector<std::string> hyps;
  std::vector<std::vector<int64_t>> tokens;
  for (const auto& t : translations) {
    hyps.push_back(t.texts.front());
    tokens.push_back(t.hypotheses.empty() ? std::vector<int64_t>{} : t.hypotheses.front().tokens);
  }
  const auto raw = estimate_confidence(*translator, sources, tokens, o->translator.translation, ConfidenceModel());
  print_quality("raw", measure_confidence(raw, hyps, refs));
  auto rated = [&](const ConfidenceModel& model) {
    auto out = raw;
    for (auto& s : out) model.rate(s);
    return out;
  };
  if (calibration) {
    print_quality("calibrated (" + o->calibration + ")", measure_confidence(rated(*calibration), hyps, refs));
  }
  if (!o->fit.empty()) {
    ConfidenceModel fitted;
    if (!check_usage([&] { fitted = fit_confidence(raw, hyps, refs); }, argv[0])) return kExitFailure;
    fitted.save(o->fit);
    print_quality("calibrated on these pairs (in-sample) -> " + o->fit, measure_confidence(rated(fitted), hyps, refs));
  }
  return kExitOk;
}

const CommandRegistration confidence_registration(
    {"confidence", "measure and calibrate translation confidence against references", run_confidence, 37});

}  // namespace
}  // namespace torchmt::cli
