// torchmt evaluate: sacreBLEU-exact corpus BLEU and chrF of a hypothesis file against a reference.
#include <exception>
#include <iostream>

#include "cli_options.h"
#include "torchmt/evaluation/report.h"
#include "torchmt/evaluation/utf8_line_reader.h"

namespace torchmt::cli {

namespace {

int run_evaluate(int argc, char** argv) {
  cxxopts::Options options(argv[0],
                           "Score a hypothesis file against a reference file with corpus BLEU and chrF, "
                           "computed exactly as sacreBLEU 2.6.0 does by default (13a tokenization, cased).");
  options.add_options()("hyp", "hypothesis file, one sentence per line (plain or .gz)", cxxopts::value<std::string>())(
      "ref", "reference file, line i translating the same source as hypothesis line i", cxxopts::value<std::string>());
  int code = kExitOk;
  auto r = parse_flags(options, argc, argv, code);
  if (!r) return code;
  if (!require_flag(*r, "hyp", argv[0]) || !require_flag(*r, "ref", argv[0])) return kExitUsage;
  const std::string hyp_path = (*r)["hyp"].as<std::string>();
  const std::string ref_path = (*r)["ref"].as<std::string>();

  std::vector<std::string> hyps, refs;
  try {
    hyps = evaluation::read_utf8_lines(hyp_path);
    refs = evaluation::read_utf8_lines(ref_path);
  } catch (const std::exception& e) {
    std::cerr << argv[0] << ": " << e.what() << "\n";
    return kExitFailure;
  }
  if (hyps.size() != refs.size()) {
    // A shifted or truncated hypothesis file would score silently wrong: refuse it.
    std::cerr << argv[0] << ": line counts differ: hypothesis file " << hyp_path << " has " << hyps.size()
              << " lines, reference file " << ref_path << " has " << refs.size() << " lines\n";
    return kExitFailure;
  }
  return evaluation::score_and_print(hyps, refs, std::cout);
}

const CommandRegistration registration({"evaluate", "corpus BLEU and chrF of a hypothesis file (sacreBLEU-exact)",
                                        run_evaluate, 40});

}  // namespace
}  // namespace torchmt::cli
