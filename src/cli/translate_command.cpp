// torchmt translate: raw sentences in (stdin or -i), translations out (stdout or -o), one
// line per input line in input order. Progress and timing go to stderr.
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>
#include <tuple>

#include <torch/torch.h>

#include "cli_options.h"
#include "torchmt/decoding/confidence.h"
#include "data/document.h"
#include "torchmt/decoding/attention_svg.h"
#include "decoding/document_translator.h"
#include "util/atomic_file.h"
#include "torchmt/util/device.h"
#include "util/heap.h"
#include "util/progress.h"
#include "input_lines.h"
#include "torchmt/util/strings.h"
#include "data/parallel_corpus.h"
#include "torchmt/decoding/reverse_rescoring.h"
#include "torchmt/decoding/translation_options.h"
#include "torchmt/loading/model_loader.h"

namespace torchmt::cli {
namespace {

// A line's characters that other programs read as line ends (CR, VT, FF, NEL, U+2028, U+2029:
// Python's splitlines) as spaces: --split-sentences copies the text between sentences, and the
// output keeps one line per input line.
std::string without_line_breaks(std::string line) {
  std::string out;
  out.reserve(line.size());
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == '\r' || c == '\v' || c == '\f') {
      out += ' ';
    } else if (line.compare(i, 2, "\xC2\x85") == 0) {
      out += ' ';
      i += 1;
    } else if (line.compare(i, 3, "\xE2\x80\xA8") == 0 || line.compare(i, 3, "\xE2\x80\xA9") == 0) {
      out += ' ';
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

void write_attention_picture(Translator& translator, const std::string& source, const Translation& translation,
                             const std::string& path, int64_t layer, int64_t head) {
  if (translation.hypotheses.empty()) throw std::runtime_error("--attention-svg: the first input line is empty");
  atomic_write(path, render_attention_svg(
                         cross_attention_map(translator, source, translation.hypotheses.front().tokens, layer, head)));
}

// A file with one line per input line (--target-prefix, --constraints), read window by window.
class AlignedLines {
 public:
  AlignedLines(std::string flag, std::string path, bool strict) : flag_(std::move(flag)), path_(std::move(path)) {
    lines_ = std::make_unique<InputLines>(path_, strict);
  }
  // The next n lines; a file that ends first is an error.
  std::vector<std::string>& read(size_t n) {
    lines_->read(n, window_);
    if (window_.size() != n) throw std::runtime_error(flag_ + " " + path_ + " has fewer lines than the input");
    return window_;
  }
  void check_ended() {
    if (lines_->read(1, window_)) throw std::runtime_error(flag_ + " " + path_ + " has more lines than the input");
  }

 private:
  std::string flag_, path_;
  std::unique_ptr<InputLines> lines_;
  std::vector<std::string> window_;
};

// A line of --constraints: its tab-separated phrases (empty fields dropped).
std::vector<std::string> constraint_phrases(const std::string& line) {
  std::vector<std::string> phrases;
  for (size_t begin = 0;;) {
    const size_t end = line.find('\t', begin);
    std::string phrase = line.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    if (phrase.find_first_not_of(' ') != std::string::npos) phrases.push_back(std::move(phrase));
    if (end == std::string::npos) return phrases;
    begin = end + 1;
  }
}

// One output line of --confidence: tsv (translation, sentence, words, their confidences) or text
// (the words below `threshold` marked [[so]], then ' ||| ' and the sentence's confidence).
void append_confidence(std::string& text, const std::string& translation, const SentenceConfidence* c, bool tsv,
                       double threshold) {
  if (tsv) {
    text += translation;
    text += '\t';
    if (c) append_number(text, c->confidence, 3);
    text += '\t';
    for (size_t w = 0; c && w < c->words.size(); ++w) (text += w ? " " : "") += c->words[w].score.word;
    text += '\t';
    for (size_t w = 0; c && w < c->words.size(); ++w) {
      if (w) text += ' ';
      append_number(text, c->words[w].confidence, 3);
    }
  } else if (c) {
    for (size_t w = 0; w < c->words.size(); ++w) {
      if (w) text += ' ';
      const bool doubtful = c->words[w].confidence < threshold;
      text += doubtful ? "[[" + c->words[w].score.word + "]]" : c->words[w].score.word;
    }
    text += " ||| ";
    append_number(text, c->confidence, 3);
  }
  text += '\n';
}

struct TranslateCommandOptions {
  TranslatorConfig translator;
  ReverseRescoring rescoring;
  std::string input = "-", output = "-";
  std::string target_prefix;
  std::string constraints;
  std::string attention_svg;
  int64_t attention_layer = -1, attention_head = -1;
  std::string format = "text";
  bool split_sentences = false;
  std::string source_language = "de";
  bool alignments = false;
  std::string confidence, confidence_model;
  double confidence_threshold = 0.5;
  int64_t alignment_layer = AlignmentOptions{}.layer, alignment_head = AlignmentOptions{}.head;
  bool strict_utf8 = false;
  int64_t buffer_size = 1024;
  bool unbuffered = false;
  bool tensor_pool = false;
  bool quiet = false;
};

const OptionTable<TranslateCommandOptions>& translate_option_table() {
  using O = TranslateCommandOptions;
  static const auto table = OptionTable<O>("translate")
      .include(translator_option_table(), &O::translator)
      .include(reverse_rescoring_option_table(), &O::rescoring)
      .add("input", &O::input, "input file (plain or .gz), - for stdin", {"i", "io", {}})
      .add("output", &O::output, "output file, - for stdout", {"o", "io", {}})
      .add("target_prefix", &O::target_prefix,
           "file with one target prefix per input line (an empty line: none): each translation starts with "
           "its prefix and continues it", {"", "io", {}})
      .add("constraints", &O::constraints,
           "file with one line per input line: the target phrases its translation must hold, tab-separated (an "
           "empty line: none); lexically constrained beam search with dynamic beam allocation",
           {"", "io", {}})
      .add("attention_svg", &O::attention_svg,
           "write the cross-attention heatmap of the first sentence to this SVG file",
           {"", "io", {}})
      .add("attention_layer", &O::attention_layer, "decoder layer for the picture (-1 = last)", {"", "io", {}})
      .add("attention_head", &O::attention_head, "head for the picture (-1 = mean over heads)", {"", "io", {}})
      .add("format", &O::format,
           "text: one sentence (or with --split-sentences, a paragraph) per line; html: the whole input is one "
           "HTML document: text translated sentence by sentence, tags, attributes and untranslated elements "
           "kept, inline tags put around the aligned words",
           {"", "io", {}})
      .add("split_sentences", &O::split_sentences,
           "split each line into sentences (rules of --source-language), translate them as one batch and join "
           "them with the original spacing (always on for --format html)",
           {"", "io", {}})
      .add("source_language", &O::source_language, "the input's language for sentence splitting: de or en",
           {"", "io", {}})
      .add("alignments", &O::alignments,
           "append ' ||| ' and the word alignment (Pharaoh pairs source-target, 0-based, of whitespace-separated "
           "words) to each output line, from the model's cross-attention",
           {"", "io", {}})
      .add("confidence", &O::confidence,
           "text: append ' ||| ' and the sentence's confidence to each line, words below "
           "--confidence-threshold marked [[so]]; tsv: translation, sentence confidence, words, word "
           "confidences (tab-separated); from the model's probabilities, or --confidence-model's calibration",
           {"", "io", {}})
      .add("confidence_model", &O::confidence_model,
           "a calibration from `torchmt confidence --fit` (default: the raw estimate, exp(mean piece log-probability))",
           {"", "io", {}})
      .add("confidence_threshold", &O::confidence_threshold, "--confidence text marks the words below it",
           {"", "io", {}})
      .add("alignment_layer", &O::alignment_layer, "decoder layer the alignments read (negative: from the top)",
           {"", "io", {}})
      .add("alignment_head", &O::alignment_head, "attention head the alignments read (-1 = mean over heads)",
           {"", "io", {}})
      .add("strict_utf8", &O::strict_utf8,
           "refuse input with invalid UTF-8 (default: such bytes become U+FFFD, with a warning naming the line)",
           {"", "io", {}})
      .add("buffer_size", &O::buffer_size,
           "input lines read, translated and written at a time (memory is bounded by it, not by the input)",
           {"", "io", {}})
      .add("unbuffered", &O::unbuffered,
           "translate and write each line as soon as it is read (the default when stdin is a terminal)",
           {"", "io", {}})
      .add("tensor_pool", &O::tensor_pool,
           "take tensor buffers of 64 KiB and more from torchmt's pool (util/heap.h): a flatter peak on endless "
           "input, 30-90 MiB more on a short one",
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
  use_heap_policy(o->translator.translation);  // before the load and the workers start
  if (o->buffer_size < 1) {
    std::cerr << argv[0] << ": --buffer-size must be at least 1\n";
    return kExitUsage;
  }
  DocumentFormat format = DocumentFormat::kText;
  std::unique_ptr<SentenceSplitter> splitter;
  ConfidenceModel confidence_model;
  if (!check_usage(
          [&] {
            format = parse_document_format(o->format);
            splitter = std::make_unique<SentenceSplitter>(o->source_language);
            if (format == DocumentFormat::kHtml && o->alignments)
              throw std::invalid_argument("--alignments is for --format text (HTML output carries its tags)");
            const bool documents = format == DocumentFormat::kHtml || o->split_sentences;
            if (documents && o->translator.translation.search.nbest > 1)
              throw std::invalid_argument("--nbest needs one sentence per line (not --split-sentences or --format html)");
            if (!o->confidence.empty() && o->confidence != "text" && o->confidence != "tsv")
              throw std::invalid_argument("--confidence must be text or tsv, got '" + o->confidence + "'");
            if (!o->confidence.empty() && (documents || o->alignments || o->translator.translation.search.nbest > 1))
              throw std::invalid_argument(
                  "--confidence rates one translation per line (not with --nbest, --alignments, --split-sentences "
                  "or --format html)");
            if (!o->confidence_model.empty() && o->confidence.empty())
              throw std::invalid_argument("--confidence-model needs --confidence text or tsv");
            if (!(o->confidence_threshold >= 0.0 && o->confidence_threshold <= 1.0))
              throw std::invalid_argument("--confidence-threshold must be between 0 and 1");
            if (auto clash = same_file_twice(
                    translator_inputs(o->translator, {{"-i/--input", o->input},
                                                      {"--target-prefix", o->target_prefix},
                                                      {"--constraints", o->constraints},
                                                      {"--confidence-model", o->confidence_model},
                                                      {"--reverse-model", o->rescoring.reverse_model}}),
                    {{"-o/--output", o->output}, {"--attention-svg", o->attention_svg}}))
              throw std::invalid_argument(*clash);
            if (!o->confidence_model.empty()) confidence_model = ConfidenceModel::load(o->confidence_model);
            if (o->alignments && o->translator.translation.search.nbest > 1)
              throw std::invalid_argument("--alignments prints the best translation's: it cannot go with --nbest");
            if (documents && (!o->target_prefix.empty() || !o->constraints.empty()))
              throw std::invalid_argument(
                  "--target-prefix and --constraints steer one sentence per line (not --split-sentences or --format html)");
            if ((documents || o->alignments) && o->rescoring.enabled())
              throw std::invalid_argument("--reverse-weight reranks one sentence per line (not with --split-sentences, "
                                          "--format html or --alignments)");
            if ((documents || o->alignments) && !o->attention_svg.empty())
              throw std::invalid_argument("--attention-svg draws one sentence per line (not with --split-sentences, "
                                          "--format html or --alignments)");
          },
          argv[0]))
    return kExitUsage;
  const bool documents = format == DocumentFormat::kHtml || o->split_sentences;
  AlignmentOptions alignment_options;
  alignment_options.layer = o->alignment_layer;
  alignment_options.head = o->alignment_head;
  // Scores are printed only in the n-best format (and `--dtype auto` measures this search).
  o->translator.translation.search.scores = o->translator.translation.search.nbest > 1;
  std::unique_ptr<Translator> translator, reverse;
  if (!check_usage(
          [&] {
            translator = std::make_unique<Translator>(load_cli_translator(o->translator));
            reverse = load_reverse_translator(o->rescoring, o->translator, *translator);
          },
          argv[0]))
    return kExitUsage;
  if (!o->attention_svg.empty() && !translator->model()) {
    std::cerr << argv[0] << ": --attention-svg needs one checkpoint, not an export or an ensemble\n";
    return kExitUsage;
  }
  if (o->alignments && !translator->model()) return usage_error(argv[0], "--alignments needs one checkpoint, not an export or an ensemble");
  if (o->tensor_pool) use_cpu_tensor_pool();  // after the load: the weights stay where LibTorch put them (heap.h)
  InputLines input(o->input, o->strict_utf8, "translated");
  // --target-prefix and --constraints: files aligned with the input, line for line.
  std::unique_ptr<AlignedLines> prefixes, constraints;
  for (auto [flag, path, aligned] : {std::make_tuple("--target-prefix", &o->target_prefix, &prefixes),
                                     std::make_tuple("--constraints", &o->constraints, &constraints)}) {
    if (path->empty()) continue;
    if (*path == o->input && o->input == "-")
      return usage_error(argv[0], std::string(flag) + " and the input cannot both be standard input");
    const int64_t input_lines = count_lines(o->input), aligned_lines = count_lines(*path);
    if (input_lines >= 0 && aligned_lines >= 0 && input_lines != aligned_lines)
      return usage_error(argv[0], line_count_mismatch(o->input, input_lines, *path, aligned_lines));
    *aligned = std::make_unique<AlignedLines>(flag, *path, o->strict_utf8);
  }
  // Streaming: a window of lines in, its translations out (in order) before the next is read,
  // so memory is bounded by the window and a pipe gets its output as it goes.
  // HTML: the whole input is one document.
  const size_t window = format == DocumentFormat::kHtml ? std::numeric_limits<size_t>::max()
                        : o->unbuffered || input.is_terminal() ? 1
                                                               : static_cast<size_t>(o->buffer_size);
  OutputText output(o->output);
  const bool nbest = o->translator.translation.search.nbest > 1;
  // Translations written to the terminal are their own progress, and a person typing needs none.
  const bool to_terminal = !output.to_file() && ::isatty(STDOUT_FILENO) == 1;
  const bool show_progress = !o->quiet && !to_terminal && !input.is_terminal();
  Progress progress("translate", "lines", show_progress ? count_lines(o->input) : -1,
                    show_progress ? ProgressStyle::kAuto : ProgressStyle::kQuiet);
  const auto line_done = [&progress](int64_t n) { progress.add(n); };

  std::vector<std::string> lines;
  std::vector<LineSteering> steering;
  std::string first_line;
  Translation first_translation;
  int64_t count = 0, tokens = 0;
  LineSample cut;
  double seconds = 0;
  while (input.read(window, lines)) {
    const auto start = std::chrono::steady_clock::now();
    const bool first_window = count == 0;
    steering.clear();
    if (prefixes || constraints) steering.resize(lines.size());
    if (prefixes) {
      auto& window = prefixes->read(lines.size());
      for (size_t i = 0; i < lines.size(); ++i) steering[i].target_prefix = std::move(window[i]);
    }
    if (constraints) {
      const auto& window = constraints->read(lines.size());
      for (size_t i = 0; i < lines.size(); ++i) steering[i].constraints = constraint_phrases(window[i]);
    }
    TranslationOptions options = o->translator.translation;
    options.first_line = count;  // sampling's streams: the line numbers in the whole input
    std::string text;
    if (documents || o->alignments) {
      // Lines (or the whole HTML input) as documents; one translate() call for their sentences.
      std::vector<Document> docs;
      if (format == DocumentFormat::kHtml) {
        std::string whole;
        for (const auto& line : lines) (whole += line) += '\n';
        docs.emplace_back(whole, format, splitter.get());
        progress.add(static_cast<int64_t>(lines.size()) - 1);  // the document counts once below
      } else {
        for (const auto& line : lines)
          docs.emplace_back(without_line_breaks(line), format, o->split_sentences ? splitter.get() : nullptr);
      }
      for (const auto& d : translate_documents(*translator, docs, options, alignment_options, o->alignments, line_done)) {
        text += d.text;
        if (o->alignments) (text += " ||| ") += to_pharaoh(d.alignment);
        if (format == DocumentFormat::kText) text += '\n';
      }
      count += static_cast<int64_t>(lines.size());
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } else {
      auto translations = translate_rescored(*translator, reverse ? *reverse : *translator, o->rescoring.weight, lines,
                                             options, line_done, steering);
      std::vector<SentenceConfidence> confidences;
      if (!o->confidence.empty()) confidences = rate_translations(*translator, lines, translations, options, confidence_model);
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      for (size_t i = 0; i < translations.size(); ++i, ++count) {
        const auto& t = translations[i];
        for (const auto& h : t.hypotheses) tokens += static_cast<int64_t>(h.tokens.size()) + 1;
        if (t.truncated) cut.add(count + 1);
        if (!confidences.empty()) {
          append_confidence(text, t.texts.front(), t.hypotheses.empty() ? nullptr : &confidences[i],
                            o->confidence == "tsv", o->confidence_threshold);
          continue;
        }
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
    }
    // Each window's tensors are gone by now; their memory goes back, so the next window
    // starts from the same footprint (heap.h).
    return_free_heap_memory();
    output.write(text);
  }
  if (prefixes) prefixes->check_ended();
  if (constraints) constraints->check_ended();
  output.commit();
  progress.finish();
  if (cut.count() > 0)
    std::cerr << argv[0] << ": warning: " << cut.count() << (cut.count() == 1 ? " input line" : " input lines")
              << " longer than the model accepts, translated cut: " << cut.describe() << " of "
              << (o->input == "-" ? "standard input" : o->input) << "\n";
  std::cerr << "translated " << count << " lines in " << seconds << " s ("
            << static_cast<int64_t>(count / std::max(seconds, 1e-9)) << " lines/s, ";
  if (!documents && !o->alignments)  // (documents do not count their tokens)
    std::cerr << static_cast<int64_t>(tokens / std::max(seconds, 1e-9)) << " target tokens/s, ";
  std::cerr << translator->precision_name() << ")\n";
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
