// torchmt shortlist: builds an output vocabulary shortlist (data/shortlist.h) from a parallel
// corpus with a model's tokenizers, for `translate --shortlist` and `serve --shortlist`.
#include <chrono>
#include <iostream>

#include "cli_options.h"
#include "util/atomic_file.h"
#include "data/parallel_corpus.h"
#include "data/shortlist.h"
#include "torchmt/loading/model_loader.h"
#include "torchmt/util/strings.h"

namespace torchmt::cli {
namespace {

struct ShortlistCommandOptions {
  std::string model, src, tgt, output;
  ShortlistOptions shortlist;
};

const OptionTable<ShortlistCommandOptions>& shortlist_option_table() {
  using O = ShortlistCommandOptions;
  static const auto table = OptionTable<O>("shortlist")
      .add("model", &O::model, "the model (checkpoint or export) whose tokenizers the shortlist is for", {"m", "", {}})
      .add("src", &O::src, "source side of a parallel corpus, e.g. the training set (plain or .gz)")
      .add("tgt", &O::tgt, "target side, line by line the source's translation")
      .add("output", &O::output, "shortlist file to write", {"o", "", {}})
      .add("per_source", [](O& o) -> int64_t& { return o.shortlist.per_source; },
           "target pieces listed per source piece (by p(target | source) in the corpus)")
      .add("frequent", [](O& o) -> int64_t& { return o.shortlist.frequent; },
           "most frequent target pieces, candidates for every sentence")
      .add("min_count", [](O& o) -> int64_t& { return o.shortlist.min_count; },
           "sentence pairs a (source, target) piece pair must share to be listed");
  return table;
}

int run_shortlist(int argc, char** argv) {
  int code = kExitOk;
  auto o = parse_options(shortlist_option_table(),
                         "Build an output vocabulary shortlist from a parallel corpus: `translate --shortlist FILE`\n"
                         "then computes only each sentence's candidate target pieces.",
                         argc, argv, code);
  if (!o) return code;
  for (const auto& [value, name] :
       {std::pair{&o->model, "model"}, {&o->src, "src"}, {&o->tgt, "tgt"}, {&o->output, "output"}})
    if (value->empty()) return usage_error(argv[0], std::string("missing required option --") + name);
  if (o->shortlist.per_source < 0 || o->shortlist.frequent < 0 || o->shortlist.min_count < 1)
    return usage_error(argv[0], "--per-source and --frequent must not be negative, --min-count at least 1");
  if (o->shortlist.per_source == 0 && o->shortlist.frequent == 0)
    return usage_error(argv[0], "--per-source 0 with --frequent 0 lists no target piece at all");
  if (auto clash = same_file_twice({{"-m/--model", o->model}, {"--src", o->src}, {"--tgt", o->tgt}},
                                   {{"-o/--output", o->output}}))
    return usage_error(argv[0], *clash);
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Translator> translator;
  if (!check_usage([&] { translator = std::make_unique<Translator>(load_translator(o->model, torch::kCPU, torch::kFloat)); },
                   argv[0]))
    return kExitUsage;
  CorpusOptions corpus_options;
  corpus_options.max_sentence_tokens = int64_t{1} << 20;  // nothing skipped for length
  const auto corpus =
      load_parallel_corpus(o->src, o->tgt, translator->src_tokenizer(), translator->tgt_tokenizer(), corpus_options);
  const auto shortlist =
      Shortlist::build(corpus, translator->src_tokenizer(), translator->tgt_tokenizer(), o->shortlist);
  shortlist.save(o->output);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "wrote " << o->output << " from " << with_thousands(corpus.size()) << " pairs ("
            << corpus.stats.summary() << "), " << seconds << " s\n";
  return kExitOk;
}

const CommandRegistration shortlist_registration({"shortlist", "build an output vocabulary shortlist from a parallel corpus",
                                                  run_shortlist, 55});

}  // namespace
}  // namespace torchmt::cli
