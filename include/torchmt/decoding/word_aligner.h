#pragma once
// Word alignments read from the model's cross-attention: each target piece is aligned to the
// source piece (eos excluded) that one decoder layer's attention, one head's or the mean of
// the heads, weighs most; pieces map to whitespace-separated words (SentencePiece's U+2581
// marks a word's first piece), and the pairs of words are the alignment. The default layer and
// head are the ones with the lowest alignment error rate on the hand-aligned Multi30k pairs in
// tests/data/alignment_gold (tools/bench/alignment_error; the measurements are recorded there).
#include <cstdint>
#include <string>
#include <vector>

#include "torchmt/data/word_alignment.h"

namespace torchmt {

class Translator;

struct AlignmentOptions {
  int64_t layer = -1;  // decoder layer, from the top when negative
  int64_t head = -1;   // -1 = the mean over heads
  // Read target piece t's attention where t is the decoder's input (t + 1), not where it is
  // predicted (t).
  bool shift = false;
};

// One alignment per pair: sources as given to Translator::translate, targets as the ids of
// its hypotheses (without bos/eos). Batched; needs a native model (std::runtime_error
// otherwise), std::invalid_argument for a layer or head out of range.
std::vector<WordAlignment> align_words(Translator& translator, const std::vector<std::string>& sources,
                                       const std::vector<std::vector<int64_t>>& targets,
                                       const AlignmentOptions& options = {}, int64_t batch_size = 32);

// The attention the alignments read, per pair: one row per target piece (the step that predicted
// it), one weight per source piece and the source's eos (CTranslate2's return_attention). Empty
// for a blank source or an empty target. Batched as align_words.
std::vector<std::vector<std::vector<float>>> attention_vectors(Translator& translator,
                                                               const std::vector<std::string>& sources,
                                                               const std::vector<std::vector<int64_t>>& targets,
                                                               const AlignmentOptions& options = {},
                                                               int64_t batch_size = 32);

}  // namespace torchmt
