// torchmt translate: raw sentences in (stdin or -i), translations out (stdout or -o), one
// line per input line in input order. Progress and timing go to stderr.
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <sstream>

#include <torch/torch.h>

#include "cli_options.h"
#include "torchmt/decoding/attention_svg.h"
#include "torchmt/util/atomic_file.h"
#include "torchmt/util/device.h"
#include "torchmt/util/heap.h"
#include "torchmt/util/progress.h"
#include "input_lines.h"
#include "torchmt/data/parallel_corpus.h"
#include "torchmt/decoding/translation_options.h"
#include "torchmt/export/exported_model.h"

namespace torchmt::cli {
namespace {

void write_attention_picture(Translator& translator, const std::string& source, const Translation& translation,
                             const std::string& path, int64_t layer, int64_t head) {
  if (translation.hypotheses.empty()) throw std::runtime_error("--attention-svg: the first input line is empty");
  atomic_write(path, render_attention_svg(
                         cross_attention_map(translator, source, translation.hypotheses.front().tokens, layer, head)));
}

struct TranslateCommandOptions {
  TranslatorConfig translator;
  std::string input = "-", output = "-";
  std::string target_prefix;
  std::string attention_svg;
  int64_t attention_layer = -1, attention_head = -1;
  bool strict_utf8 = false;
  int64_t buffer_size = 1024;
  bool unbuffered = false;
  bool quiet = false;
};

const OptionTable<TranslateCommandOptions>& translate_option_table() {
  using O = TranslateCommandOptions;
  static const auto table = OptionTable<O>("translate")
      .include(translator_option_table(), &O::translator)
      .add("input", &O::input, "input file (plain or .gz), - for stdin", {"i", "io", {}})
      .add("output", &O::output, "output file, - for stdout", {"o", "io", {}})
      .add("target_prefix", &O::target_prefix,
           "file with one target prefix per input line (an empty line: none): each translation starts with "
           "its prefix and continues it", {"", "io", {}})
      .add("attention_svg", &O::attention_svg,
           "write the cross-attention heatmap of the first sentence to this SVG file",
           {"", "io", {}})
      .add("attention_layer", &O::attention_layer, "decoder layer for the picture (-1 = last)", {"", "io", {}})
      .add("attention_head", &O::attention_head, "head for the picture (-1 = mean over heads)", {"", "io", {}})
      .add("strict_utf8", &O::strict_utf8,
           "refuse input with invalid UTF-8 (default: such bytes become U+FFFD, with a warning naming the line)",
           {"", "io", {}})
      .add("buffer_size", &O::buffer_size,
           "input lines read, translated and written at a time (memory is bounded by it, not by the input)",
           {"", "io", {}})
      .add("unbuffered", &O::unbuffered,
           "translate and write each line as soon as it is read (the default when stdin is a terminal)",
           {"", "io", {}})
      .add("quiet", &O::quiet, "no progress on stderr (by default: a live line on a terminal, a line every 5 s in a log)",
           {"q", "io", {}});
  return table;
}

int run_translate(int argc, char** argv) {
  int code = kExitOk;
  auto o = parse_options(translate_option_table(),
                         "Translate sentences with a trained model (checkpoint or TorchScript export).",
                         argc, argv, code);
  if (!o) return code;
  if (o->buffer_size < 1) {
    std::cerr << argv[0] << ": --buffer-size must be at least 1\n";
    return kExitUsage;
  }
  // Scores are printed only in the n-best format (and `--dtype auto` measures this search).
  o->translator.translation.search.scores = o->translator.translation.search.nbest > 1;
  std::unique_ptr<Translator> translator;
  if (!check_usage([&] { translator = std::make_unique<Translator>(load_translator(o->translator)); }, argv[0]))
    return kExitUsage;
  if (!o->attention_svg.empty() && !translator->model()) {
    std::cerr << argv[0] << ": --attention-svg needs a checkpoint, not an export\n";
    return kExitUsage;
  }
  use_cpu_tensor_pool();  // after the load: the weights stay where LibTorch put them (heap.h)
  InputLines input(o->input, o->strict_utf8);
  std::unique_ptr<InputLines> prefixes;
  if (!o->target_prefix.empty()) {
    if (o->target_prefix == o->input && o->input == "-")
      return usage_error(argv[0], "--target-prefix and the input cannot both be standard input");
    const int64_t input_lines = count_lines(o->input), prefix_lines = count_lines(o->target_prefix);
    if (input_lines >= 0 && prefix_lines >= 0 && input_lines != prefix_lines)
      return usage_error(argv[0], line_count_mismatch(o->input, input_lines, o->target_prefix, prefix_lines));
    prefixes = std::make_unique<InputLines>(o->target_prefix, o->strict_utf8);
  }
  // Streaming: a window of lines in, its translations out (in order) before the next is read,
  // so memory is bounded by the window and a pipe gets its output as it goes.
  const size_t window = o->unbuffered || input.is_terminal() ? 1 : static_cast<size_t>(o->buffer_size);
  std::unique_ptr<AtomicFileWriter> file;  // -o FILE: appears whole at the end, never half
  if (o->output != "-") file = std::make_unique<AtomicFileWriter>(o->output);
  const bool nbest = o->translator.translation.search.nbest > 1;
  // Translations written to the terminal are their own progress, and a person typing needs none.
  const bool to_terminal = !file && ::isatty(STDOUT_FILENO) == 1;
  const bool show_progress = !o->quiet && !to_terminal && !input.is_terminal();
  Progress progress("translate", "lines", show_progress ? count_lines(o->input) : -1,
                    show_progress ? ProgressStyle::kAuto : ProgressStyle::kQuiet);
  const auto line_done = [&progress](int64_t n) { progress.add(n); };

  std::vector<std::string> lines, prefix_lines;
  std::vector<LineSteering> steering;
  std::string first_line;
  Translation first_translation;
  int64_t count = 0, tokens = 0, truncated = 0;
  double seconds = 0;
  while (input.read(window, lines)) {
    const auto start = std::chrono::steady_clock::now();
    const bool first_window = count == 0;
    steering.clear();
    if (prefixes) {
      prefixes->read(lines.size(), prefix_lines);
      if (prefix_lines.size() != lines.size())
        throw std::runtime_error("--target-prefix " + o->target_prefix + " has fewer lines than the input");
      for (auto& p : prefix_lines) steering.push_back(LineSteering{std::move(p)});
    }
    TranslationOptions options = o->translator.translation;
    options.first_line = count;  // sampling's streams: the line numbers in the whole input
    auto translations = translator->translate(lines, options, line_done, steering);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::string text;
    for (size_t i = 0; i < translations.size(); ++i, ++count) {
      const auto& t = translations[i];
      for (const auto& h : t.hypotheses) tokens += static_cast<int64_t>(h.tokens.size()) + 1;
      truncated += t.truncated ? 1 : 0;
      if (!nbest) {
        text += t.texts.front();
        text += '\n';
        continue;
      }
      // Moses n-best format: index ||| hypothesis ||| score
      for (size_t j = 0; j < t.texts.size(); ++j) {
        std::ostringstream line;
        line << count << " ||| " << t.texts[j] << " ||| "
             << (j < t.hypotheses.size() ? t.hypotheses[j].score : 0.0) << "\n";
        text += line.str();
      }
    }
    if (first_window) {
      first_line = lines.front();
      first_translation = std::move(translations.front());
    }
    // Each window's tensors are gone by now; their memory goes back, so the next window
    // starts from the same footprint (heap.h).
    return_free_heap_memory();
    if (file) {
      file->write(text);
    } else {
      std::cout << text << std::flush;
      if (!std::cout) throw std::runtime_error("cannot write standard output");
    }
  }
  if (prefixes && prefixes->read(1, prefix_lines))
    throw std::runtime_error("--target-prefix " + o->target_prefix + " has more lines than the input");
  if (file) file->commit();
  progress.finish();
  if (truncated > 0)
    std::cerr << argv[0] << ": warning: " << truncated << " input lines were longer than the model accepts and were cut\n";
  std::cerr << "translated " << count << " lines in " << seconds << " s ("
            << static_cast<int64_t>(count / std::max(seconds, 1e-9)) << " sentences/s, "
            << static_cast<int64_t>(tokens / std::max(seconds, 1e-9)) << " target tokens/s, "
            << translator->precision_name() << ")\n";
  if (!translator->dtype_reason().empty()) std::cerr << "dtype auto: " << translator->dtype_reason() << "\n";

  if (!o->attention_svg.empty()) {
    if (count == 0) throw std::runtime_error("--attention-svg: no input");
    write_attention_picture(*translator, first_line, first_translation, o->attention_svg, o->attention_layer,
                            o->attention_head);
  }
  return kExitOk;
}

const CommandRegistration translate_registration({"translate", "translate sentences (greedy or beam search)", run_translate, 30});

}  // namespace
}  // namespace torchmt::cli
