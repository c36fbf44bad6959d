#pragma once
// BPE-dropout (Provilkov et al. 2020), the subword regularisation of a BPE vocabulary: a sentence
// is segmented again with each merge skipped at probability p, so the model sees the same text
// in many segmentations. It re-runs SentencePiece's BPE encoder (a queue of adjacent pairs, the
// best-scored merge first, a skipped merge dropped as SentencePiece's own sampling does) from the
// stored ids, so a corpus preprocessed once needs no text: with p = 0 it gives the stored ids back.
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "torchmt/data/tokenizer.h"

namespace torchmt {

class BpeDropout {
 public:
  // Throws std::invalid_argument when p is outside [0, 1) or the tokenizer is not a SentencePiece
  // BPE model. Segmentations longer than max_tokens keep the stored ids (the length limit a
  // corpus was filtered by must still hold).
  BpeDropout(const Tokenizer& tokenizer, double p, int64_t max_tokens);

  // Appends to `out` a segmentation of the text that `ids` (a sentence's ids, without bos/eos)
  // encode; a function of (ids, key) only, so a resumed run sees the same segmentations.
  void sample(const int64_t* ids, int64_t n, uint64_t key, std::vector<int64_t>& out) const;

  double probability() const { return p_; }

 private:
  struct Merge {
    int32_t piece;
    float score;
  };
  double p_;
  int64_t max_tokens_;
  std::vector<std::vector<int32_t>> characters_;  // id -> its characters' ids; {id} when atomic
  std::unordered_map<uint64_t, Merge> merges_;     // (left id << 32 | right id) -> the merged piece
};

}  // namespace torchmt
