// torchmt translate: raw sentences in (stdin or -i), translations out (stdout or -o), one
// line per input line in input order. Progress and timing go to stderr.
#include <chrono>
#include <sstream>
#include <iostream>

#include <torch/torch.h>

#include "cli_options.h"
#include "torchmt/decoding/attention_svg.h"
#include "torchmt/util/atomic_file.h"
#include "input_lines.h"
#include "torchmt/decoding/translation_options.h"
#include "torchmt/export/exported_model.h"

namespace torchmt::cli {
namespace {

void write_attention_picture(Translator& translator, const std::string& source, const Translation& translation,
                             const std::string& path, int64_t layer, int64_t head) {
  if (translation.hypotheses.empty()) throw std::runtime_error("--attention-svg: the first input line is empty");
  const auto& ids = translation.hypotheses.front().tokens;
  auto weights = translator.cross_attention(source, ids, layer, head);  // [T, S]
  std::vector<std::string> target_labels;
  for (auto id : ids) target_labels.push_back(translator.tgt_tokenizer().id_to_piece(id));
  target_labels.push_back("</s>");
  std::vector<std::string> source_labels;
  for (auto id : translator.encode_source(source)) source_labels.push_back(translator.src_tokenizer().id_to_piece(id));
  // Row t of the weights is the decoder input at t (bos + prefix), predicting target t.
  std::string title = "cross-attention, decoder layer " + (layer < 0 ? std::string("last") : std::to_string(layer)) +
                      ", " + (head < 0 ? std::string("mean of heads") : "head " + std::to_string(head));
  atomic_write(path, render_attention_svg(weights, target_labels, source_labels, title));
}

struct TranslateCommandOptions {
  TranslatorConfig translator;
  std::string input = "-", output = "-";
  std::string attention_svg;
  int64_t attention_layer = -1, attention_head = -1;
  bool strict_utf8 = false;
};

const OptionTable<TranslateCommandOptions>& translate_option_table() {
  using O = TranslateCommandOptions;
  static const auto table = OptionTable<O>("translate")
      .include(translator_option_table(), &O::translator)
      .add("input", &O::input, "input file (plain or .gz), - for stdin", {"i", "io", {}})
      .add("output", &O::output, "output file, - for stdout", {"o", "io", {}})
      .add("attention_svg", &O::attention_svg,
           "write the cross-attention heatmap of the first sentence to this SVG file",
           {"", "io", {}})
      .add("attention_layer", &O::attention_layer, "decoder layer for the picture (-1 = last)", {"", "io", {}})
      .add("attention_head", &O::attention_head, "head for the picture (-1 = mean over heads)", {"", "io", {}})
      .add("strict_utf8", &O::strict_utf8,
           "refuse input with invalid UTF-8 (default: such bytes become U+FFFD, with a warning naming the line)",
           {"", "io", {}});
  return table;
}

int run_translate(int argc, char** argv) {
  int code = kExitOk;
  auto o = parse_options(translate_option_table(),
                         "Translate sentences with a trained model (checkpoint or TorchScript export).",
                         argc, argv, code);
  if (!o) return code;
  std::unique_ptr<Translator> translator;
  if (!check_usage([&] { translator = std::make_unique<Translator>(load_translator(o->translator)); }, argv[0]))
    return kExitUsage;
  if (!o->attention_svg.empty() && !translator->model()) {
    std::cerr << argv[0] << ": --attention-svg needs a checkpoint, not an export\n";
    return kExitUsage;
  }
  auto lines = read_input_lines(o->input, o->strict_utf8);

  const auto start = std::chrono::steady_clock::now();
  auto translations = translator->translate(lines, o->translator.translation);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::ostringstream file;  // -o FILE: written at once by atomic_write, never half
  std::ostream& out = o->output == "-" ? std::cout : file;
  const bool nbest = o->translator.translation.search.nbest > 1;
  int64_t tokens = 0;
  for (size_t i = 0; i < translations.size(); ++i) {
    const auto& t = translations[i];
    for (const auto& h : t.hypotheses) tokens += static_cast<int64_t>(h.tokens.size()) + 1;
    if (!nbest) {
      out << t.texts.front() << "\n";
      continue;
    }
    // Moses n-best format: index ||| hypothesis ||| score
    for (size_t j = 0; j < t.texts.size(); ++j)
      out << i << " ||| " << t.texts[j] << " ||| " << (j < t.hypotheses.size() ? t.hypotheses[j].score : 0.0) << "\n";
  }
  out.flush();
  if (o->output != "-") atomic_write(o->output, file.str());
  size_t truncated = 0;
  for (const auto& t : translations) truncated += t.truncated ? 1 : 0;
  if (truncated > 0)
    std::cerr << argv[0] << ": warning: " << truncated << " input lines were longer than the model accepts and were cut\n";
  std::cerr << "translated " << lines.size() << " lines in " << seconds << " s ("
            << static_cast<int64_t>(lines.size() / std::max(seconds, 1e-9)) << " sentences/s, "
            << static_cast<int64_t>(tokens / std::max(seconds, 1e-9)) << " target tokens/s)\n";

  if (!o->attention_svg.empty()) {
    if (lines.empty()) throw std::runtime_error("--attention-svg: no input");
    write_attention_picture(*translator, lines[0], translations[0], o->attention_svg, o->attention_layer,
                            o->attention_head);
  }
  return kExitOk;
}

const CommandRegistration registration({"translate", "translate sentences (greedy or beam search)", run_translate, 30});

}  // namespace
}  // namespace torchmt::cli
