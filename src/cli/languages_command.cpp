// torchmt languages: what a checkpoint says it translates; and, for one written before torchmt 0.3
// recorded it, a copy that knows its languages and has a language identifier learned from texts
// (--learn de=train.de), without training: what `serve` needs for /detect and source "auto".
#include <iostream>

#include "cli_options.h"
#include "torchmt/util/strings.h"
#include "util/atomic_file.h"
#include "torchmt/data/language_identifier.h"
#include "io/checkpoint.h"

namespace torchmt::cli {
namespace {

struct LanguagesCommandOptions {
  std::string model, output, source_language, target_language;
  std::vector<std::string> learn;
};

const OptionTable<LanguagesCommandOptions>& languages_option_table() {
  using O = LanguagesCommandOptions;
  const OptionExtra group{"", "languages", {}};
  static const auto table =
      OptionTable<O>("languages")
          .add("model", &O::model, "a checkpoint", {"m", "languages", {}})
          .add("output", &O::output, "write a copy with the languages below (weights only, no optimizer state)",
               {"o", "languages", {}})
          .add("source_language", &O::source_language, "the source language's code (with -o)", group)
          .add("target_language", &O::target_language, "the target language's code (with -o)", group)
          .add("learn", &O::learn,
               "with -o: learn the language identifier from texts, CODE=FILE for each language (repeat)", group);
  return table;
}

int run_languages(int argc, char** argv) {
  int code = kExitOk;
  auto o = parse_options(languages_option_table(),
                         "Print the languages a checkpoint records; with -o, write a copy that records "
                         "--source-language/--target-language and an identifier learned from --learn CODE=FILE texts.",
                         argc, argv, code);
  if (!o) return code;
  if (o->model.empty()) return usage_error(argv[0], "missing required option -m/--model");
  const bool writing = !o->output.empty();
  if (!writing && (!o->source_language.empty() || !o->target_language.empty() || !o->learn.empty()))
    return usage_error(argv[0], "--source-language, --target-language and --learn go with -o");
  try {
    for (const auto* c : {&o->source_language, &o->target_language})
      if (!c->empty()) check_language_code(*c, c == &o->source_language ? "--source-language" : "--target-language");
  } catch (const std::invalid_argument& e) {
    return usage_error(argv[0], e.what());
  }
  if (auto clash = same_file_twice({{"-m/--model", o->model}}, {{"-o/--output", writing ? o->output : ""}}))
    return usage_error(argv[0], *clash);
  try {
    LoadedCheckpoint checkpoint = load_checkpoint(o->model, c10::Device(c10::kCPU));
    CheckpointMeta& meta = checkpoint.meta;
    if (!writing) {
      const ModelLanguages languages = checkpoint_languages(meta);
      std::string known;
      for (const auto& l : languages.identifier.languages()) known += (known.empty() ? "" : ",") + l;
      std::cout << "source\t" << (meta.source_language.empty() ? "-" : meta.source_language) << "\n"
                << "target\t" << (meta.target_language.empty() ? "-" : meta.target_language) << "\n"
                << "identifier\t" << (known.empty() ? "-" : known) << "\n"
                << "both directions\t" << (meta.both_directions ? "yes" : "no") << "\n";
      if (!meta.target_columns.empty() && !meta.source_columns.empty())  // translation keeps to each way's pieces
        std::cout << "output columns\t" << meta.target_columns.size() << " into the target language, "
                  << meta.source_columns.size() << " into the source language\n";
      return kExitOk;
    }
    if (!o->source_language.empty()) meta.source_language = o->source_language;
    if (!o->target_language.empty()) meta.target_language = o->target_language;
    if (meta.source_language.empty() || meta.target_language.empty())
      return usage_error(argv[0], o->model + " records no languages: give --source-language and --target-language");
    if (!o->learn.empty())
      meta.language_identifier = learn_languages(o->learn, {meta.source_language, meta.target_language}).serialize();
    save_checkpoint(o->output, checkpoint.model, nullptr, meta);
    std::cerr << "wrote " << o->output << ": " << meta.source_language << " -> " << meta.target_language
              << (meta.language_identifier.empty() ? ", no language identifier (give --learn CODE=FILE)" : "") << "\n";
  } catch (const std::invalid_argument& e) {
    return usage_error(argv[0], e.what());
  } catch (const std::exception& e) {
    std::cerr << argv[0] << ": error: " << escape_control(e.what()) << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

const CommandRegistration languages_registration({"languages", "the languages a checkpoint records, or give it them",
                                                  run_languages, 62});

}  // namespace
}  // namespace torchmt::cli
