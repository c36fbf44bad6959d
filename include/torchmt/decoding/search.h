#pragma once
// Greedy and beam search behind one entry point, over any IncrementalDecoder.
#include <vector>

#include <ATen/core/Tensor.h>

#include "torchmt/decoding/constraints.h"
#include "torchmt/decoding/incremental_decoder.h"
#include "torchmt/decoding/translation_options.h"

namespace torchmt {

struct Hypothesis {
  std::vector<int64_t> tokens;  // without bos and eos
  double score = 0.0;           // length-normalised log-probability
  double log_prob = 0.0;        // raw sum of token log-probabilities (eos included)
  // Each token's log-probability as the search saw it, eos's last (tokens.size() + 1 of them);
  // empty where the search computed none (greedy without scores, a TorchScript export's search).
  // Confidence reads them instead of decoding the hypothesis again.
  std::vector<float> token_log_probs;
};

// One list per source sentence, best first, at most options.nbest long.
using SearchResult = std::vector<std::vector<Hypothesis>>;

// What one sentence asks of the search beyond the options.
struct SentenceSteering {
  // Target tokens the output starts with (no bos): forced, their log-probabilities counted in
  // the score, part of Hypothesis::tokens (CTranslate2's target_prefix).
  std::vector<int64_t> prefix;
  // The only tokens the output may hold besides the prefix's (sorted; empty = any): a shortlist
  // (IncrementalDecoder::restrict_output).
  std::vector<int64_t> vocabulary;
  // Sampling's random stream: the sentence's line number in the whole input.
  int64_t stream = 0;
  // Target phrases the output must hold (terminology): beam search with dynamic beam
  // allocation, which a beam of 1 runs too; eos only once all are in.
  Phrases constraints = {};
  bool prefix_cut = false;  // the prefix was longer than the model's output holds: cut to it
};
// One per row of src, or empty: nothing asked, each row's stream its index.
using Steering = std::vector<SentenceSteering>;

// src [B, S] on the decoder's device; source lengths are counted from non-pad tokens.
SearchResult greedy_search(IncrementalDecoder& decoder, const at::Tensor& src, const SearchOptions& options,
                           const Steering& steering = {});
SearchResult beam_search(IncrementalDecoder& decoder, const at::Tensor& src, const SearchOptions& options,
                         const Steering& steering = {});
// beam_size 1 without constraints -> greedy_search, otherwise beam_search.
SearchResult search(IncrementalDecoder& decoder, const at::Tensor& src, const SearchOptions& options,
                    const Steering& steering = {});

// Per-sentence length limits in steps (eos included): a * |source| + b, capped at
// max_len_cap, at least 1 (room for eos); with a prefix or constraints, at least the prefix's
// and the constraints' tokens + 1.
std::vector<int64_t> max_lengths(const at::Tensor& src, const SearchOptions& options, const Steering& steering = {});

// Whether any sentence has constraints.
bool has_constraints(const Steering& steering);

// The rows' shortlists for IncrementalDecoder::restrict_output; empty when no row has one.
std::vector<const std::vector<int64_t>*> vocabularies_of(const Steering& steering);

// Sampling (SearchOptions::sampling): the token drawn from a row of log-probabilities [vocab]
// with the uniform number u in [0, 1).
int64_t sample_token(const float* log_probs, int64_t vocab, const SearchOptions& options, double u);
// The uniform number in [0, 1) of draw `step` of random stream `stream` under `seed`: a
// counter-based generator (SplitMix64 of the three), so a sentence's draws depend on nothing
// else: not its batch, its row, or the thread.
double sampling_uniform(int64_t seed, int64_t stream, int64_t step);

// SearchOptions' token rules (min_length, disable_unk, no_repeat_ngram_size,
// repetition_penalty) on one step's log-probabilities lprobs [N, C], in place, on any device:
// row r follows options[r] given outputs[r], its tokens so far; a null entry leaves the row as it
// is (inside a target prefix, at the length limit). `columns`: the tokens of lprobs' columns.
void apply_token_rules(at::Tensor& lprobs, const OutputColumns& columns,
                       const std::vector<const std::vector<int64_t>*>& outputs,
                       const std::vector<const SearchOptions*>& options);

// GNMT length penalty ((5 + length) / 6)^alpha.
double length_penalty(int64_t length, double alpha);

}  // namespace torchmt
