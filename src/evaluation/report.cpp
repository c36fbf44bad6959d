#include "evaluation/report.h"

#include "torchmt/evaluation/bleu.h"
#include "torchmt/evaluation/chrf.h"

namespace torchmt::evaluation {

int score_and_print(const std::vector<std::string>& hyps, const std::vector<std::string>& refs, std::ostream& out) {
  const BleuScore bleu = corpus_bleu(hyps, refs);
  const ChrfScore chrf = corpus_chrf(hyps, refs);
  out << bleu.format() << "\n"
      << chrf.format() << "\n"
      << "BLEU signature: " << bleu.signature() << "\n"
      << "chrF2 signature: " << chrf.signature() << "\n";
  return 0;
}

}  // namespace torchmt::evaluation
