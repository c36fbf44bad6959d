#pragma once
// Corpus BLEU exactly as sacreBLEU 2.6.0 computes it by default: 13a tokenization, cased,
// "exp" smoothing, n-grams up to 4, statistics summed over the corpus, no effective order,
// brevity penalty from the summed lengths. One reference per hypothesis.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace torchmt::evaluation {

struct BleuScore {
  double score = 0;                      // 0..100
  std::array<double, 4> precisions{};    // n-gram precisions in percent, smoothed as sacreBLEU does
  double bp = 0;                         // brevity penalty
  double ratio = 0;                      // hyp_len / ref_len (0 when ref_len is 0)
  int64_t hyp_len = 0, ref_len = 0;      // tokens after 13a tokenization
  std::array<int64_t, 4> correct{};      // clipped n-gram matches per order
  std::array<int64_t, 4> total{};        // hypothesis n-grams per order

  // "BLEU = 38.21 70.1/46.2/32.0/22.6 (BP = 0.987 ratio = 0.987 hyp_len = 12034 ref_len = 12190)",
  // character for character what sacreBLEU's BLEUScore.format() prints.
  std::string format() const;
  // sacreBLEU's reproducibility signature, with this implementation's name as the version:
  // "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:torchmt-0.1.0+sacrebleu-2.6.0".
  std::string signature() const;
};

// `hyps[i]` is scored against `refs[i]`. Throws std::invalid_argument when the sizes differ or
// a line is not valid UTF-8.
BleuScore corpus_bleu(const std::vector<std::string>& hyps, const std::vector<std::string>& refs);

}  // namespace torchmt::evaluation
