// torchmt evaluate: sacreBLEU-exact corpus BLEU and chrF of a hypothesis file against a reference.
#include <exception>
#include <fstream>
#include <memory>
#include <iostream>

#include "cli_options.h"
#include "torchmt/evaluation/report.h"
#include "torchmt/evaluation/utf8_line_reader.h"
#include "torchmt/util/atomic_file.h"
#include "translation_session.h"

namespace torchmt::cli {

namespace {

int run_evaluate(int argc, char** argv) {
  cxxopts::Options options(argv[0],
                           "Score translations against a reference with corpus BLEU and chrF, computed exactly as "
                           "sacreBLEU 2.6.0 does by default (13a tokenization, cased). Either score an existing "
                           "--hyp file, or translate --src with -m MODEL first.");
  options.add_options()("hyp", "hypothesis file, one sentence per line (plain or .gz)", cxxopts::value<std::string>())(
      "src", "source file to translate with -m (plain or .gz)", cxxopts::value<std::string>())(
      "ref", "reference file, line i translating the same source as hypothesis line i", cxxopts::value<std::string>())(
      "save-hyp", "with -m: also write the translations to this file", cxxopts::value<std::string>());
  add_translation_flags(options);
  int code = kExitOk;
  auto r = parse_flags(options, argc, argv, code);
  if (!r) return code;
  if (!require_flag(*r, "ref", argv[0])) return kExitUsage;
  const bool translate_first = r->count("model") > 0;
  if (translate_first == (r->count("hyp") > 0)) {
    std::cerr << argv[0] << ": give either --hyp FILE, or -m MODEL with --src FILE (see --help)\n";
    return kExitUsage;
  }
  if (translate_first && !require_flag(*r, "src", argv[0])) return kExitUsage;
  const std::string hyp_path = translate_first ? (*r)["src"].as<std::string>() : (*r)["hyp"].as<std::string>();
  const std::string ref_path = (*r)["ref"].as<std::string>();

  std::vector<std::string> hyps, refs;
  std::unique_ptr<TranslationSession> session;
  try {
    if (translate_first) session = std::make_unique<TranslationSession>(*r);
  } catch (const std::invalid_argument& e) {
    std::cerr << argv[0] << ": " << e.what() << " (see --help)\n";
    return kExitUsage;
  }
  try {
    hyps = evaluation::read_utf8_lines(hyp_path);  // the sources, when translating first
    refs = evaluation::read_utf8_lines(ref_path);
  } catch (const std::exception& e) {
    std::cerr << argv[0] << ": " << e.what() << "\n";
    return kExitFailure;
  }
  if (hyps.size() != refs.size()) {
    // A shifted or truncated hypothesis file would score silently wrong: refuse it.
    std::cerr << argv[0] << ": line counts differ: " << (translate_first ? "source" : "hypothesis") << " file " << hyp_path << " has " << hyps.size()
              << " lines, reference file " << ref_path << " has " << refs.size() << " lines\n";
    return kExitFailure;
  }
  if (translate_first) {
    std::vector<std::string> translated;
    for (auto& t : session->translate(hyps)) translated.push_back(std::move(t.texts.front()));
    hyps = std::move(translated);
    if (r->count("save-hyp")) {
      std::string text;
      for (const auto& h : hyps) text += h + "\n";
      atomic_write((*r)["save-hyp"].as<std::string>(), text);
    }
  }
  return evaluation::score_and_print(hyps, refs, std::cout);
}

const CommandRegistration registration({"evaluate", "corpus BLEU and chrF of a hypothesis file (sacreBLEU-exact)",
                                        run_evaluate, 40});

}  // namespace
}  // namespace torchmt::cli
