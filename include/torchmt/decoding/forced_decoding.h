#pragma once
// Forced decoding: the model's log-probability of a given target, token by token (fairseq's
// --score-reference, CTranslate2's score_batch, marian-scorer). It runs the search's own steps
// (IncrementalDecoder::step_top_k, as beam search reads them), so a hypothesis that translate()
// produced scores here as the search scored it, on every model format, dtype and device.
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "torchmt/decoding/incremental_decoder.h"

namespace torchmt {

class Tokenizer;

// For each row of src [B, S] (on the decoder's device) and its target (ids without bos or eos):
// the log-probability of each target token and then of eos, targets[r]->size() + 1 values.
// Rows leave the batch once their eos is scored (select), as finished sentences leave a search.
// `vocabularies`: one per row (sorted ids, empty: every piece), or none; a row's restricted as a
// search restricts it (IncrementalDecoder::restrict_output), its target's pieces among them.
std::vector<std::vector<float>> force_decode(IncrementalDecoder& decoder, const at::Tensor& src,
                                             const std::vector<const std::vector<int64_t>*>& targets, int64_t bos_id,
                                             int64_t eos_id, const std::vector<std::vector<int64_t>>& vocabularies = {});

// A sentence's summed log-probability as the search sums it: in float, step by step (eos included).
double sum_log_probs(const std::vector<float>& log_probs);

// Target words of a scored sentence: pieces joined where SentencePiece joins them (a piece that
// starts with U+2581 begins a word), each word with its text, the sum and the mean of its pieces'
// log-probabilities. The eos's log-probability belongs to no word.
struct WordScore {
  std::string word;
  double log_prob = 0.0;       // sum over its pieces
  double mean_log_prob = 0.0;  // per piece (Bergamot's word confidence)
  double min_log_prob = 0.0;   // its least likely piece's
  int64_t pieces = 0;
};
std::vector<WordScore> word_scores(const Tokenizer& tokenizer, const std::vector<int64_t>& tokens,
                                   const std::vector<float>& log_probs);

}  // namespace torchmt
