#include "torchmt/data/word_alignment.h"

#include <algorithm>
#include <charconv>
#include <stdexcept>

namespace torchmt {

std::string to_pharaoh(const WordAlignment& alignment) {
  std::string out;
  for (const auto& [s, t] : alignment) {
    if (!out.empty()) out += ' ';
    out += std::to_string(s) + '-' + std::to_string(t);
  }
  return out;
}

GoldAlignment parse_gold_alignment(std::string_view line) {
  GoldAlignment gold;
  for (const auto& span : whitespace_words(line)) {
    const std::string_view pair = line.substr(span.begin, span.end - span.begin);
    const size_t sep = pair.find_first_of("-?");
    int32_t s = -1, t = -1;
    const auto parse = [](std::string_view digits, int32_t& value) {
      const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), value);
      return !digits.empty() && r.ec == std::errc() && r.ptr == digits.data() + digits.size() && value >= 0;
    };
    if (sep == std::string_view::npos || !parse(pair.substr(0, sep), s) || !parse(pair.substr(sep + 1), t))
      throw std::invalid_argument("alignment pair '" + std::string(pair) + "' is not i-j (sure) or i?j (possible)");
    if (pair[sep] == '-') gold.sure.emplace_back(s, t);
    gold.possible.emplace_back(s, t);
  }
  for (auto* links : {&gold.sure, &gold.possible}) {
    std::sort(links->begin(), links->end());
    links->erase(std::unique(links->begin(), links->end()), links->end());
  }
  return gold;
}

void AlignmentScore::add(const WordAlignment& predicted_links, const GoldAlignment& gold) {
  predicted += static_cast<int64_t>(predicted_links.size());
  sure += static_cast<int64_t>(gold.sure.size());
  for (const auto& link : predicted_links) {
    hit_sure += std::binary_search(gold.sure.begin(), gold.sure.end(), link) ? 1 : 0;
    hit_possible += std::binary_search(gold.possible.begin(), gold.possible.end(), link) ? 1 : 0;
  }
}

double AlignmentScore::error_rate() const {
  const auto total = predicted + sure;
  return total == 0 ? 0.0 : 1.0 - static_cast<double>(hit_sure + hit_possible) / static_cast<double>(total);
}
double AlignmentScore::precision() const {
  return predicted == 0 ? 0.0 : static_cast<double>(hit_possible) / static_cast<double>(predicted);
}
double AlignmentScore::recall() const { return sure == 0 ? 0.0 : static_cast<double>(hit_sure) / static_cast<double>(sure); }

std::vector<int32_t> piece_words(const std::vector<std::string>& pieces) {
  static const std::string kMark = "\xE2\x96\x81";  // U+2581
  std::vector<int32_t> words;
  int32_t word = -1;
  for (const auto& piece : pieces) {
    if (word < 0 || piece.compare(0, kMark.size(), kMark) == 0) ++word;
    words.push_back(word);
  }
  return words;
}

}  // namespace torchmt
