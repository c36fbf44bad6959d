#pragma once
// Corpus chrF exactly as sacreBLEU 2.6.0 computes it by default: character n-grams of orders
// 1..6 over code points with whitespace removed, no word n-grams, beta 2, statistics summed over
// the corpus, and precision/recall averaged over the orders that occur (sacreBLEU's default
// "effective order" smoothing, eps_smoothing=False). One reference per hypothesis.
#include <string>
#include <vector>

namespace torchmt::evaluation {

struct ChrfScore {
  double score = 0;  // 0..100

  // "chrF2 = 58.43", what sacreBLEU's CHRFScore.format() prints.
  std::string format() const;
  // "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:torchmt-0.1.0+sacrebleu-2.6.0".
  std::string signature() const;
};

// `hyps[i]` is scored against `refs[i]`. Throws std::invalid_argument when the sizes differ or
// a line is not valid UTF-8.
ChrfScore corpus_chrf(const std::vector<std::string>& hyps, const std::vector<std::string>& refs);

}  // namespace torchmt::evaluation
