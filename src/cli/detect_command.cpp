// torchmt detect: the language of each input line, by a model's language identifier (the one
// `train` learned from its corpora) or one learned here from texts (--learn de=train.de):
// "code<TAB>confidence" per line, or every language (--all) most likely first.
#include <chrono>
#include <iostream>

#include "cli_options.h"
#include "input_lines.h"
#include "torchmt/util/strings.h"
#include "torchmt/data/language_identifier.h"
#include "torchmt/loading/model_loader.h"

namespace torchmt::cli {
namespace {

struct DetectCommandOptions {
  std::string model, input = "-";
  std::vector<std::string> learn;
  bool all = false, quiet = false;
};

const OptionTable<DetectCommandOptions>& detect_option_table() {
  using O = DetectCommandOptions;
  const OptionExtra group{"", "detect", {}};
  static const auto table =
      OptionTable<O>("detect")
          .add("model", &O::model, "a checkpoint or export whose language identifier to use", {"m", "detect", {}})
          .add("learn", &O::learn,
               "instead of --model: learn languages from texts, CODE=FILE each (repeat: --learn de=a.de --learn en=a.en)",
               group)
          .add("input", &O::input, "texts, one per line (- = standard input)", {"i", "detect", {}})
          .add("all", &O::all, "every language with its confidence, most likely first", group)
          .add("quiet", &O::quiet, "no timing on stderr", {"q", "detect", {}});
  return table;
}

int run_detect(int argc, char** argv) {
  int code = kExitOk;
  auto o = parse_options(detect_option_table(),
                         "The language of each line: its code and the confidence (percent), from a model's language "
                         "identifier (-m) or one learned from texts (--learn de=train.de --learn en=train.en).",
                         argc, argv, code);
  if (!o) return code;
  if (o->model.empty() == o->learn.empty()) return usage_error(argv[0], "give --model or --learn (one of them)");
  LanguageIdentifier identifier;
  try {
    if (!o->model.empty()) {
      identifier = load_translator(o->model, c10::Device(c10::kCPU), c10::kFloat).languages().identifier;
      if (identifier.empty())
        throw std::runtime_error(o->model + " has no language identifier (trained before torchmt 0.3 recorded one): "
                                 "use --learn CODE=FILE");
    }
    if (!o->learn.empty()) identifier = learn_languages(o->learn);
  } catch (const std::invalid_argument& e) {
    return usage_error(argv[0], e.what());
  } catch (const std::exception& e) {
    std::cerr << argv[0] << ": error: " << escape_control(e.what()) << "\n";
    return kExitFailure;
  }
  try {
    InputLines input(o->input, false, "identified");
    std::vector<std::string> lines;
    std::string out;
    int64_t texts = 0;
    double seconds = 0;
    while (input.read(4096, lines)) {
      out.clear();
      for (const auto& line : lines) {
        const auto start = std::chrono::steady_clock::now();
        const auto guesses = identifier.detect(line);
        seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        for (size_t k = 0; k < (o->all ? guesses.size() : 1); ++k) {
          if (k) out += '\t';
          out += guesses[k].language + '\t';
          append_number(out, guesses[k].confidence, 2);
        }
        out += '\n';
      }
      texts += static_cast<int64_t>(lines.size());
      std::cout << out << std::flush;
    }
    if (!o->quiet)
      std::cerr << "detect: " << texts << " texts, " << (texts ? seconds * 1e6 / static_cast<double>(texts) : 0.0)
                << " us per text (languages: " << identifier.languages().size() << ")\n";
  } catch (const std::exception& e) {
    std::cerr << argv[0] << ": error: " << escape_control(e.what()) << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

const CommandRegistration detect_registration({"detect", "the language of each line (the model's identifier)",
                                               run_detect, 38});

}  // namespace
}  // namespace torchmt::cli
