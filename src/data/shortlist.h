#pragma once
// A vocabulary shortlist (Marian's lexical shortlist, CTranslate2's vocabulary map): for each
// source piece, the target pieces a translation of it is likely to use, from a parallel corpus.
// A sentence's candidates are the union of its source pieces' lists, the `frequent` most frequent
// target pieces and the special tokens; decoding restricts the output projection to them.
//
// Scores are co-occurrence statistics (no aligner needed, one pass over the corpus): a target
// piece t is listed for source piece s by p(t | s) = c(s, t) / c(s), sentence-level counts (a
// piece counted once per sentence), among the pieces not already in the frequent set (those
// are always candidates), best `per_source` kept. tools/bench/README.md has the coverage that
// chose it.
#include <cstdint>
#include <string>
#include <vector>

#include "data/parallel_corpus.h"
#include "torchmt/data/tokenizer.h"

namespace torchmt {

struct ShortlistOptions {
  int64_t per_source = 20;  // target pieces listed per source piece
  int64_t frequent = 50;    // most frequent target pieces, candidates for every sentence
  int64_t min_count = 1;    // pairs (s, t) seen fewer times are not listed
};

class Shortlist {
 public:
  // From a corpus's pairs, encoded with these tokenizers.
  static Shortlist build(const PairSource& corpus, const Tokenizer& src_tok, const Tokenizer& tgt_tok,
                         const ShortlistOptions& options);
  // A text file (save's format). Throws std::runtime_error naming the file and line when it is
  // not one, and when it was built for other tokenizers than these.
  static Shortlist load(const std::string& path, const Tokenizer& src_tok, const Tokenizer& tgt_tok);
  void save(const std::string& path) const;  // atomically

  // The sorted candidates of a source sentence's ids (eos and pad ignored as sources), with the
  // frequent pieces, the special tokens and `extra` (a target prefix's ids).
  std::vector<int64_t> candidates(const std::vector<int64_t>& source_ids, const std::vector<int64_t>& extra = {}) const;

  int64_t source_vocab() const { return static_cast<int64_t>(lists_.size()); }
  int64_t target_vocab() const { return target_vocab_; }
  const ShortlistOptions& options() const { return options_; }

 private:
  ShortlistOptions options_;
  std::string src_checksum_, tgt_checksum_;  // Tokenizer::checksum() of the vocabularies
  int64_t target_vocab_ = 0;
  SpecialIds source_special_, target_special_;  // the tokenizers' (an imported model's own)
  std::vector<int32_t> frequent_;            // with the special tokens
  std::vector<std::vector<int32_t>> lists_;  // per source id
};

}  // namespace torchmt
