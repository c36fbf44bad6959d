#include "torchmt/evaluation/chrf.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <stdexcept>
#include <unordered_map>

#include "evaluation/sacrebleu_compat.h"
#include "evaluation/unicode_text.h"

namespace torchmt::evaluation {
namespace {

constexpr int kCharOrder = 6;
constexpr int kBeta = 2;

using NgramCounts = std::unordered_map<std::u32string, int64_t>;

// Sums over the corpus of what CHRF._get_match_statistics returns per order.
struct OrderStatistics {
  int64_t hyp = 0, ref = 0, match = 0;
};

// extract_all_char_ngrams with whitespace=False: ''.join(line.split()), then every substring
// of length n, counted.
std::array<NgramCounts, kCharOrder> char_ngrams(const std::string& line, const char* role, size_t index) {
  const std::u32string decoded = decode_utf8_or_throw(line, std::string(role) + " line " + std::to_string(index + 1));
  std::u32string chars;
  for (const auto& piece : split_on_whitespace(decoded)) chars.append(piece);
  std::array<NgramCounts, kCharOrder> counts;
  for (size_t n = 1; n <= kCharOrder; ++n) {
    for (size_t i = 0; i + n <= chars.size(); ++i) ++counts[n - 1][chars.substr(i, n)];
  }
  return counts;
}

// CHRF._compute_f_score with eps_smoothing=False, in sacreBLEU's order of operations.
double f_score(const std::array<OrderStatistics, kCharOrder>& stats) {
  const double factor = kBeta * kBeta;
  double avg_prec = 0.0, avg_rec = 0.0;
  int effective_order = 0;
  for (const auto& s : stats) {
    if (s.hyp > 0 && s.ref > 0) {
      avg_prec += static_cast<double>(s.match) / static_cast<double>(s.hyp);
      avg_rec += static_cast<double>(s.match) / static_cast<double>(s.ref);
      ++effective_order;
    }
  }
  if (effective_order == 0) return 0.0;
  avg_prec /= effective_order;
  avg_rec /= effective_order;
  if (avg_prec + avg_rec == 0.0) return 0.0;
  double score = (1 + factor) * avg_prec * avg_rec;
  score /= (factor * avg_prec) + avg_rec;
  return 100 * score;
}

}  // namespace

ChrfScore corpus_chrf(const std::vector<std::string>& hyps, const std::vector<std::string>& refs) {
  if (hyps.size() != refs.size()) {
    throw std::invalid_argument("corpus_chrf: " + std::to_string(hyps.size()) + " hypotheses but " +
                                std::to_string(refs.size()) + " references");
  }
  std::array<OrderStatistics, kCharOrder> stats{};
  for (size_t k = 0; k < hyps.size(); ++k) {
    const auto hyp = char_ngrams(hyps[k], "hypothesis", k);
    const auto ref = char_ngrams(refs[k], "reference", k);
    for (int n = 0; n < kCharOrder; ++n) {
      int64_t hyp_count = 0, ref_count = 0, match_count = 0;
      for (const auto& [ngram, count] : hyp[n]) {
        hyp_count += count;
        auto it = ref[n].find(ngram);
        if (it != ref[n].end()) match_count += std::min(count, it->second);
      }
      for (const auto& entry : ref[n]) ref_count += entry.second;
      // sacreBLEU does not count hypothesis n-grams of an order the reference lacks.
      stats[n].hyp += ref[n].empty() ? 0 : hyp_count;
      stats[n].ref += ref_count;
      stats[n].match += match_count;
    }
  }
  return ChrfScore{f_score(stats)};
}

std::string ChrfScore::format() const {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "chrF%d = %.2f", kBeta, score);
  return buffer;
}

std::string ChrfScore::signature() const {
  return "nrefs:1|case:mixed|eff:yes|nc:" + std::to_string(kCharOrder) + "|nw:0|space:no|version:torchmt-" +
         TORCHMT_VERSION + "+sacrebleu-" + kSacrebleuCompatibleVersion;
}

}  // namespace torchmt::evaluation
