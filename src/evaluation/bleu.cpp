#include "torchmt/evaluation/bleu.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <stdexcept>
#include <unordered_map>

#include "evaluation/sacrebleu_compat.h"
#include "evaluation/tokenizer_13a.h"
#include "evaluation/unicode_text.h"

namespace torchmt::evaluation {
namespace {

constexpr int kMaxOrder = 4;

// Tokens never contain whitespace, so joining with a space is an unambiguous n-gram key.
using NgramCounts = std::unordered_map<std::u32string, int64_t>;

struct TokenizedSegment {
  std::vector<std::u32string> tokens;
  NgramCounts ngrams;  // all orders 1..4
};

// sacreBLEU's BLEU._preprocess_segment (rstrip, then 13a) and extract_all_word_ngrams.
TokenizedSegment tokenize_segment(const std::string& line, const char* role, size_t index) {
  const std::u32string decoded =
      decode_utf8_or_throw(line, std::string(role) + " line " + std::to_string(index + 1));
  TokenizedSegment segment;
  segment.tokens = split_on_whitespace(tokenize_13a(strip_trailing_whitespace(decoded)));
  const auto& tokens = segment.tokens;
  for (size_t n = 1; n <= kMaxOrder; ++n) {
    for (size_t i = 0; i + n <= tokens.size(); ++i) {
      std::u32string key = tokens[i];
      for (size_t j = i + 1; j < i + n; ++j) key.append(U" ").append(tokens[j]);
      ++segment.ngrams[key];
    }
  }
  return segment;
}

size_t order_of(const std::u32string& ngram) {
  size_t order = 1;
  for (char32_t c : ngram) order += (c == U' ');
  return order;
}

// sacreBLEU's my_log: log with log(0) floored so that exp() of the mean gives 0.
double floored_log(double x) { return x == 0.0 ? -9999999999.0 : std::log(x); }

std::string printf_string(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string printf_string(const char* format, ...) {
  char buffer[256];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  return buffer;
}

}  // namespace

BleuScore corpus_bleu(const std::vector<std::string>& hyps, const std::vector<std::string>& refs) {
  if (hyps.size() != refs.size()) {
    throw std::invalid_argument("corpus_bleu: " + std::to_string(hyps.size()) + " hypotheses but " +
                                std::to_string(refs.size()) + " references");
  }
  BleuScore s;
  for (size_t k = 0; k < hyps.size(); ++k) {
    const TokenizedSegment hyp = tokenize_segment(hyps[k], "hypothesis", k);
    const TokenizedSegment ref = tokenize_segment(refs[k], "reference", k);
    s.hyp_len += static_cast<int64_t>(hyp.tokens.size());
    s.ref_len += static_cast<int64_t>(ref.tokens.size());
    for (const auto& [ngram, count] : hyp.ngrams) {
      const size_t n = order_of(ngram) - 1;
      s.total[n] += count;
      auto it = ref.ngrams.find(ngram);
      if (it != ref.ngrams.end()) s.correct[n] += std::min(count, it->second);
    }
  }

  // BLEU.compute_bleu, statement for statement, so that rounding matches too.
  s.bp = 1.0;
  if (s.hyp_len < s.ref_len) {
    s.bp = s.hyp_len > 0 ? std::exp(1.0 - static_cast<double>(s.ref_len) / static_cast<double>(s.hyp_len)) : 0.0;
  }
  s.ratio = s.ref_len ? static_cast<double>(s.hyp_len) / static_cast<double>(s.ref_len) : 0.0;
  s.precisions.fill(0.0);
  bool any_match = false;
  for (int64_t c : s.correct) any_match = any_match || c != 0;
  if (!any_match) {  // sacreBLEU returns early with score 0 (its issue #141)
    s.score = 0.0;
    return s;
  }
  double smooth_mteval = 1.0;
  for (int n = 0; n < kMaxOrder; ++n) {
    if (s.total[n] == 0) break;  // later precisions stay 0, which makes the score 0
    if (s.correct[n] == 0) {
      smooth_mteval *= 2;
      s.precisions[n] = 100.0 / (smooth_mteval * static_cast<double>(s.total[n]));
    } else {
      s.precisions[n] = 100.0 * static_cast<double>(s.correct[n]) / static_cast<double>(s.total[n]);
    }
  }
  double log_sum = 0.0;
  for (double p : s.precisions) log_sum += floored_log(p);
  s.score = s.bp * std::exp(log_sum / kMaxOrder);
  return s;
}

std::string BleuScore::format() const {
  return printf_string("BLEU = %.2f %.1f/%.1f/%.1f/%.1f (BP = %.3f ratio = %.3f hyp_len = %lld ref_len = %lld)", score,
                       precisions[0], precisions[1], precisions[2], precisions[3], bp, ratio,
                       static_cast<long long>(hyp_len), static_cast<long long>(ref_len));
}

std::string BleuScore::signature() const {
  return std::string("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:torchmt-") + TORCHMT_VERSION +
         "+sacrebleu-" + kSacrebleuCompatibleVersion;
}

}  // namespace torchmt::evaluation
