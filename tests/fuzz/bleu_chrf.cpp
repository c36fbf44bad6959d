// Fuzz target: sacreBLEU's 13a tokenizer, corpus BLEU and chrF (evaluation/). The input is
// split into hypothesis / reference pairs: lines, each "hypothesis<TAB>reference".
#include <cmath>
#include <vector>

#include "fuzz_support.h"
#include "torchmt/evaluation/bleu.h"
#include "torchmt/evaluation/chrf.h"
#include "evaluation/tokenizer_13a.h"
#include "util/utf8.h"

using namespace torchmt;
using namespace torchmt::evaluation;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz::as_text(data, size);
  std::vector<std::string> hyps, refs;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    const size_t tab = line.find('\t');
    hyps.emplace_back(line.substr(0, tab));
    refs.emplace_back(tab == std::string_view::npos ? std::string_view() : line.substr(tab + 1));
    start = end + 1;
  }
  bool valid = true;
  for (size_t i = 0; i < hyps.size(); ++i) valid = valid && is_valid_utf8(hyps[i]) && is_valid_utf8(refs[i]);

  try {
    for (const auto& h : hyps) {
      const std::string tokens = tokenize_13a(h);
      FUZZ_CHECK(tokens.find("  ") == std::string::npos);  // single spaces between tokens
      FUZZ_CHECK(tokens.empty() || (tokens.front() != ' ' && tokens.back() != ' '));
    }
    const BleuScore bleu = corpus_bleu(hyps, refs);
    FUZZ_CHECK(valid);
    FUZZ_CHECK(std::isfinite(bleu.score) && bleu.score >= 0 && bleu.score <= 100 + 1e-9);
    FUZZ_CHECK(bleu.bp >= 0 && bleu.bp <= 1);
    for (int n = 0; n < 4; ++n) FUZZ_CHECK(bleu.correct[n] >= 0 && bleu.correct[n] <= bleu.total[n]);
    FUZZ_CHECK(!bleu.format().empty() && !bleu.signature().empty());
    const ChrfScore chrf = corpus_chrf(hyps, refs);
    FUZZ_CHECK(std::isfinite(chrf.score) && chrf.score >= 0 && chrf.score <= 100 + 1e-9);
    // A corpus scored against itself is perfect whenever it has anything to match.
    const BleuScore self = corpus_bleu(hyps, hyps);
    if (self.total[3] > 0) FUZZ_CHECK(std::fabs(self.score - 100) < 1e-9);
    const ChrfScore self_chrf = corpus_chrf(hyps, hyps);
    FUZZ_CHECK(self_chrf.score == 0 || std::fabs(self_chrf.score - 100) < 1e-9);
  } catch (const std::invalid_argument& e) {
    FUZZ_CHECK(!valid);  // the only refusal: a line that is not UTF-8
    fuzz::check_error_message(e);
  }
  return 0;
}
