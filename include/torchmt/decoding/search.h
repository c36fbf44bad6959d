#pragma once
// Greedy and beam search behind one entry point, over any IncrementalDecoder.
#include <vector>

#include <ATen/core/Tensor.h>

#include "torchmt/decoding/incremental_decoder.h"
#include "torchmt/decoding/translation_options.h"

namespace torchmt {

struct Hypothesis {
  std::vector<int64_t> tokens;  // without bos and eos
  double score = 0.0;           // length-normalised log-probability
  double log_prob = 0.0;        // raw sum of token log-probabilities (eos included)
};

// One list per source sentence, best first, at most options.nbest long.
using SearchResult = std::vector<std::vector<Hypothesis>>;

// src [B, S] on the decoder's device; source lengths are counted from non-pad tokens.
SearchResult greedy_search(IncrementalDecoder& decoder, const at::Tensor& src, const SearchOptions& options);
SearchResult beam_search(IncrementalDecoder& decoder, const at::Tensor& src, const SearchOptions& options);
// beam_size 1 -> greedy_search, otherwise beam_search.
SearchResult search(IncrementalDecoder& decoder, const at::Tensor& src, const SearchOptions& options);

// Per-sentence length limits in steps (eos included): a * |source| + b, capped at
// max_len_cap, at least 1 (room for eos).
std::vector<int64_t> max_lengths(const at::Tensor& src, const SearchOptions& options);

// GNMT length penalty ((5 + length) / 6)^alpha.
double length_penalty(int64_t length, double alpha);

}  // namespace torchmt
