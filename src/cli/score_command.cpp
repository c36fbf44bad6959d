// torchmt score: how probable the model finds given translations (forced decoding): one TSV
// line per (source, target) pair, read and written window by window.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli_options.h"
#include "input_lines.h"
#include "torchmt/util/strings.h"
#include "data/parallel_corpus.h"
#include "torchmt/decoding/forced_decoding.h"
#include "torchmt/decoding/translation_options.h"
#include "torchmt/loading/model_loader.h"
#include "util/atomic_file.h"
#include "util/heap.h"
#include "util/progress.h"

namespace torchmt::cli {
namespace {

struct ScoreCommandOptions {
  TranslatorConfig translator;
  std::string src, tgt, output = "-";
  bool piece_scores = false, word_scores = false, strict_utf8 = false, quiet = false;
  int64_t buffer_size = 4096;
};

const OptionTable<ScoreCommandOptions>& score_option_table() {
  using O = ScoreCommandOptions;
  static const auto table = OptionTable<O>("score")
      .add("src", &O::src, "source sentences, one per line (plain or .gz)", {"", "scoring", {}})
      .add("tgt", &O::tgt, "their translations, line i translating source line i (plain or .gz)", {"", "scoring", {}})
      .add("output", &O::output, "the scores (TSV), - for standard output", {"o", "scoring", {}})
      .add("piece_scores", &O::piece_scores,
           "two more columns: the target's pieces (then </s>) and each one's log-probability", {"", "scoring", {}})
      .add("word_scores", &O::word_scores,
           "two more columns: the target's words and each one's log-probability (the sum of its pieces')",
           {"", "scoring", {}})
      .add("buffer_size", &O::buffer_size, "pairs read, scored and written at a time (memory is bounded by it)",
           {"", "scoring", {}})
      .add("strict_utf8", &O::strict_utf8,
           "refuse input with invalid UTF-8 (default: such bytes become U+FFFD, with a warning naming the line)",
           {"", "scoring", {}})
      .add("quiet", &O::quiet, "no progress on stderr", {"q", "scoring", {}})
      .include(translator_option_table(), &O::translator);
  return table;
}

// Space-separated; a space or tab inside an item (a word of an unusual vocabulary) becomes
// SentencePiece's U+2581, so the columns stay countable.
void append_item(std::string& out, const std::string& item) {
  for (char c : item) {
    if (c == ' ' || c == '\t') out += "\xe2\x96\x81";
    else out += c;
  }
}

int run_score(int argc, char** argv) {
  int code = kExitOk;
  auto o = parse_options(score_option_table(),
                         "Score given translations with a model (forced decoding): for each pair of --src and --tgt "
                         "lines, one TSV line: the length-normalised score (as translate --nbest prints it, "
                         "--length-penalty), the summed log-probability of the target's pieces and its end; "
                         "--piece-scores and --word-scores add the target's pieces or words and their "
                         "log-probabilities. Invalid UTF-8 becomes U+FFFD, with a warning naming the line (--strict-utf8: an error).",
                         argc, argv, code);
  if (!o) return code;
  if (o->translator.models.empty()) return usage_error(argv[0], "missing required option -m/--model");
  if (o->src.empty()) return usage_error(argv[0], "missing required option --src");
  if (o->tgt.empty()) return usage_error(argv[0], "missing required option --tgt");
  if (o->buffer_size < 1) return usage_error(argv[0], "--buffer-size must be at least 1");
  if (o->src == "-" && o->tgt == "-") return usage_error(argv[0], "--src and --tgt cannot both be standard input");
  if (auto clash = same_file_twice(translator_inputs(o->translator, {{"--src", o->src}, {"--tgt", o->tgt}}),
                                   {{"-o/--output", o->output}}))
    return usage_error(argv[0], *clash);
  const int64_t src_lines = count_lines(o->src), tgt_lines = count_lines(o->tgt);
  if (src_lines >= 0 && tgt_lines >= 0 && src_lines != tgt_lines) {
    std::cerr << argv[0] << ": " << line_count_mismatch(o->src, src_lines, o->tgt, tgt_lines) << "\n";
    return kExitFailure;
  }
  // A missing file: before the load.
  InputLines sources(o->src, o->strict_utf8, "scored"), targets(o->tgt, o->strict_utf8, "scored");
  use_heap_policy(o->translator.translation);  // before the load and the workers start
  std::unique_ptr<Translator> translator;
  if (!check_usage([&] { translator = std::make_unique<Translator>(load_cli_translator(o->translator)); }, argv[0]))
    return kExitUsage;
  if (!translator->dtype_reason().empty()) std::cerr << "dtype auto: " << translator->dtype_reason() << "\n";

  OutputText output(o->output);
  const bool show_progress = !o->quiet && (output.to_file() || ::isatty(STDOUT_FILENO) != 1);
  Progress progress("score", "pairs", show_progress ? src_lines : -1,
                    show_progress ? ProgressStyle::kAuto : ProgressStyle::kQuiet);
  const auto window = static_cast<size_t>(o->buffer_size);
  std::vector<std::string> src, tgt;
  int64_t count = 0, tokens = 0;
  LineSample cut, blank;
  double seconds = 0;
  const Tokenizer& target_tokenizer = translator->tgt_tokenizer();
  while (true) {
    const bool more_src = sources.read(window, src), more_tgt = targets.read(window, tgt);
    if (src.size() != tgt.size()) {
      // Counted here for a pipe; a regular file's count was checked before the load.
      std::cerr << argv[0] << ": line counts differ: " << (src.size() < tgt.size() ? o->src : o->tgt)
                << " ends before " << (src.size() < tgt.size() ? o->tgt : o->src) << " (after "
                << count + static_cast<int64_t>(std::min(src.size(), tgt.size())) << " lines)\n";
      return kExitFailure;  // the output file is not written (OutputText commits only at the end)
    }
    if (!more_src && !more_tgt) break;
    const auto start = std::chrono::steady_clock::now();
    const auto scores = translator->score(src, tgt, o->translator.translation,
                                          [&progress](int64_t n) { progress.add(n); });
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::string text;
    for (size_t i = 0; i < scores.size(); ++i) {
      const PairScore& s = scores[i];
      if (s.truncated) cut.add(count + static_cast<int64_t>(i) + 1);
      if (Translator::is_blank(src[i]) || Translator::is_blank(tgt[i])) blank.add(count + static_cast<int64_t>(i) + 1);
      tokens += static_cast<int64_t>(s.log_probs.size());
      append_number(text, s.score);
      text += '\t';
      append_number(text, s.log_prob);
      if (o->piece_scores) {
        text += '\t';
        for (size_t i = 0; i < s.tokens.size(); ++i) {
          append_item(text, target_tokenizer.id_to_piece(s.tokens[i]));
          text += ' ';
        }
        text += "</s>\t";
        for (size_t i = 0; i < s.log_probs.size(); ++i) {
          if (i > 0) text += ' ';
          append_number(text, s.log_probs[i]);
        }
      }
      if (o->word_scores) {
        const auto words = word_scores(target_tokenizer, s.tokens, s.log_probs);
        text += '\t';
        for (size_t i = 0; i < words.size(); ++i) {
          if (i > 0) text += ' ';
          append_item(text, words[i].word);
        }
        text += '\t';
        for (size_t i = 0; i < words.size(); ++i) {
          if (i > 0) text += ' ';
          append_number(text, words[i].log_prob);
        }
      }
      text += '\n';
    }
    count += static_cast<int64_t>(scores.size());
    return_free_heap_memory();
    output.write(text);
  }
  output.commit();
  progress.finish();
  if (cut.count() > 0)
    std::cerr << argv[0] << ": warning: " << cut.count() << (cut.count() == 1 ? " pair" : " pairs")
              << " longer than the model accepts, scored cut: " << cut.describe() << " of " << o->src << " and "
              << o->tgt << "\n";
  // Scored as given (an empty target is the model's probability of ending at once), but most often
  // a misaligned corpus: said, with where.
  if (blank.count() > 0)
    std::cerr << argv[0] << ": warning: " << blank.count() << (blank.count() == 1 ? " pair" : " pairs")
              << " with an empty side, scored as given: " << blank.describe() << " of " << o->src << " and " << o->tgt
              << "\n";
  std::cerr << "scored " << count << " pairs in " << seconds << " s ("
            << static_cast<int64_t>(count / std::max(seconds, 1e-9)) << " pairs/s, "
            << static_cast<int64_t>(tokens / std::max(seconds, 1e-9)) << " target tokens/s, "
            << translator->precision_name() << ")\n";
  return kExitOk;
}

const CommandRegistration score_registration({"score", "score given translations (forced decoding, TSV)", run_score, 35});

}  // namespace
}  // namespace torchmt::cli
