// torchmt filter: cleans a parallel corpus by dual conditional cross-entropy
// (evaluation/corpus_filter.h) under a model src->tgt (-m) and a model tgt->src (--backward-model):
// the flags, the models, progress and the report; the work is filter_corpus's.
#include <iostream>
#include <memory>

#include "cli_options.h"
#include "data/text_file.h"
#include "torchmt/evaluation/corpus_filter.h"
#include "torchmt/decoding/translation_options.h"
#include "torchmt/loading/model_loader.h"
#include "util/heap.h"
#include "util/progress.h"

namespace torchmt::cli {
namespace {

struct FilterCommandOptions {
  TranslatorConfig translator;
  std::string backward_model;
  CorpusFilterOptions filter;
  bool quiet = false;
};

const OptionTable<FilterCommandOptions>& filter_option_table() {
  using O = FilterCommandOptions;
  const OptionExtra group{"", "filter", {}};
  static const auto table = OptionTable<O>("filter")
      .include(translator_option_table(), &O::translator)
      .add("backward_model", &O::backward_model, "the model translating --tgt into --src (-m translates --src into --tgt)", group)
      .include(corpus_filter_option_table(), &O::filter)
      .add("quiet", &O::quiet, "no progress on stderr", {"q", "filter", {}});
  return table;
}

int run_filter(int argc, char** argv) {
  int code = kExitOk;
  auto o = parse_options(filter_option_table(),
                         "Clean a parallel corpus by dual conditional cross-entropy (Junczys-Dowmunt 2018): each pair "
                         "is scored by -m (src->tgt) and --backward-model (tgt->src); the pairs probable both ways, "
                         "and about equally so, are kept.",
                         argc, argv, code);
  if (!o) return code;
  CorpusFilterOptions& f = o->filter;
  for (auto [flag, value] : {std::pair<const char*, const std::string*>{"-m/--model", nullptr},
                             {"--backward-model", &o->backward_model}, {"--src", &f.src}, {"--tgt", &f.tgt},
                             {"--kept-src", &f.kept_src}, {"--kept-tgt", &f.kept_tgt}}) {
    const bool missing = value ? value->empty() : o->translator.models.empty();
    if (missing) return usage_error(argv[0], std::string("missing required option ") + flag);
  }
  if (o->translator.models.size() != 1) return usage_error(argv[0], "filter takes one forward model (-m)");
  if (!check_usage([&] { f.validate(); }, argv[0])) return kExitUsage;
  f.forward_name = "-m " + o->translator.models.front();
  f.backward_name = "--backward-model " + o->backward_model;
  // A missing file: an error before the slow load (filter_corpus counts the lines, once).
  { LineReader src_file(f.src), tgt_file(f.tgt); }
  use_heap_policy(o->translator.translation);
  std::unique_ptr<Translator> forward, backward;
  TranslatorConfig backward_config = o->translator;
  backward_config.models = {o->backward_model};
  if (!check_usage(
          [&] {
            forward = std::make_unique<Translator>(load_cli_translator(o->translator));
            backward = std::make_unique<Translator>(load_cli_translator(backward_config));
          },
          argv[0]))
    return kExitUsage;
  std::unique_ptr<Progress> progress;
  CorpusFilterReport report;
  if (!check_usage(
          [&] {
            report = filter_corpus(
                *forward, *backward, o->translator.translation, f,
                [&](const std::string& unit, int64_t total) {
                  if (progress) progress->finish();
                  progress = std::make_unique<Progress>("filter", unit, total,
                                                        o->quiet ? ProgressStyle::kQuiet : ProgressStyle::kAuto);
                },
                [&](int64_t n) { progress->add(n); });
          },
          argv[0]))
    return kExitUsage;
  if (progress) progress->finish();
  for (const auto& line : report.rules(f)) std::cerr << "filter: " << line << "\n";
  if (f.realign && report.pairs > report.kept + report.unscorable) {
    std::cerr << "filter: --realign keeps re-paired pairs scoring at most " << report.realign_threshold;
    if (f.realign_quantile < 1) std::cerr << ", the " << f.realign_quantile << " quantile of the kept pairs' scores";
    std::cerr << "\n";
  }
  if (const std::string w = report.truncation_warning(f.src, f.tgt); !w.empty())
    std::cerr << argv[0] << ": warning: " << w << "\n";
  std::cerr << "filter: " << report.summary() << "\n";
  return kExitOk;
}

const CommandRegistration filter_registration(
    {"filter", "clean a parallel corpus by dual conditional cross-entropy", run_filter, 36});

}  // namespace
}  // namespace torchmt::cli
