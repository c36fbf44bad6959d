#pragma once
// Word alignments between a sentence and its translation: pairs (source word, target word) of
// whitespace-separated words, written as Pharaoh pairs ("0-0 1-2 ..."), and the alignment error
// rate (Och & Ney) against a gold standard of sure and possible links. Light header: no LibTorch.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "torchmt/data/sentence_splitter.h"

namespace torchmt {

using WordAlignment = std::vector<std::pair<int32_t, int32_t>>;  // (source word, target word), sorted, unique

// "0-0 1-2 ..." (empty for no pairs).
std::string to_pharaoh(const WordAlignment& alignment);

// A hand alignment: sure links "i-j", possible links "i?j" (every sure link is also possible).
struct GoldAlignment {
  WordAlignment sure, possible;
};
// std::invalid_argument naming the bad pair.
GoldAlignment parse_gold_alignment(std::string_view line);

// AER = 1 - (|A & S| + |A & P|) / (|A| + |S|), summed over a corpus.
struct AlignmentScore {
  int64_t predicted = 0, sure = 0, hit_sure = 0, hit_possible = 0;
  void add(const WordAlignment& predicted_links, const GoldAlignment& gold);
  double error_rate() const;
  double precision() const;  // |A & P| / |A|
  double recall() const;     // |A & S| / |S|
};

// The word of each SentencePiece piece: a piece starting with U+2581 starts a new word, any
// other continues the current one (the first word is 0 even when its first piece has no mark).
std::vector<int32_t> piece_words(const std::vector<std::string>& pieces);

}  // namespace torchmt
