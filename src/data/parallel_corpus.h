#pragma once
// Reading a sentence-aligned parallel corpus into token ids: strict about alignment and
// explicit about what it skips. In memory (validation sets, tests) here; corpora of any size
// go through the binary dataset (binary_dataset.h), which encodes with the same encode_pairs().
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "torchmt/data/special_ids.h"
#include "torchmt/data/tokenizer.h"

namespace torchmt {

// What the batcher reads: pairs of token ids by position, without bos/eos.
class PairSource {
 public:
  virtual ~PairSource() = default;
  virtual int64_t size() const = 0;
  virtual int64_t src_length(int64_t i) const = 0;
  virtual int64_t tgt_length(int64_t i) const = 0;
  // Writes the ids of pair i (src_length(i) / tgt_length(i) of them) to `out`.
  virtual void copy_src(int64_t i, int64_t* out) const = 0;
  virtual void copy_tgt(int64_t i, int64_t* out) const = 0;
  virtual int64_t line(int64_t i) const = 0;  // 0-based line number in the original files
  // A mapped corpus returns the pages it read to the page cache; in memory, nothing to do.
  virtual void release_pages() const {}
};

// The ids a model trained on `corpora` must be able to predict (train --output-columns corpus):
// [vocab] bool, true for every id their targets hold and for the special ids.
at::Tensor target_ids(const std::vector<const PairSource*>& corpora, int64_t vocab, const SpecialIds& special);

// `forward`'s pairs with their sides swapped (target -> source): a second direction trained
// from the same encoded corpus, without a second copy of it. `forward` must outlive it.
class ReversedPairs : public PairSource {
 public:
  explicit ReversedPairs(const PairSource& forward) : forward_(forward) {}
  int64_t size() const override { return forward_.size(); }
  int64_t src_length(int64_t i) const override { return forward_.tgt_length(i); }
  int64_t tgt_length(int64_t i) const override { return forward_.src_length(i); }
  void copy_src(int64_t i, int64_t* out) const override { forward_.copy_tgt(i, out); }
  void copy_tgt(int64_t i, int64_t* out) const override { forward_.copy_src(i, out); }
  int64_t line(int64_t i) const override { return forward_.line(i); }
  void release_pages() const override { forward_.release_pages(); }

 private:
  const PairSource& forward_;
};

struct EncodedPair {
  std::vector<int32_t> src, tgt;  // without bos/eos
  int64_t index = 0;              // 0-based line number in the original files
};

struct CorpusStats {
  int64_t total = 0, kept = 0, too_long = 0, empty = 0, invalid_utf8 = 0;
  // "kept 28,962 of 29,000 pairs: 31 too long, 7 empty, 0 invalid UTF-8"
  std::string summary() const;
  CorpusStats& operator+=(const CorpusStats& other);
};

struct EncodedCorpus : PairSource {
  std::vector<EncodedPair> pairs;  // in file order
  CorpusStats stats;

  int64_t size() const override { return static_cast<int64_t>(pairs.size()); }
  int64_t src_length(int64_t i) const override { return static_cast<int64_t>(at(i).src.size()); }
  int64_t tgt_length(int64_t i) const override { return static_cast<int64_t>(at(i).tgt.size()); }
  void copy_src(int64_t i, int64_t* out) const override;
  void copy_tgt(int64_t i, int64_t* out) const override;
  int64_t line(int64_t i) const override { return at(i).index; }

 private:
  const EncodedPair& at(int64_t i) const { return pairs[static_cast<size_t>(i)]; }
};

struct CorpusOptions {
  // A pair is skipped as too long when either side, with the eos/bos it carries in a
  // batch, exceeds this many tokens. Nothing is ever truncated.
  int64_t max_sentence_tokens = 256;
  int num_threads = 0;  // encoding threads; 0: hardware concurrency
};

// Encodes lines[i] of both sides with all threads; pair i gets index first_line + i. Pairs with
// invalid UTF-8 (either side), an empty side or a side over max_sentence_tokens are skipped and
// counted. The one encoder of both the in-memory corpus and `torchmt preprocess`. `overlong`
// (empty, or one per pair): pairs already known to be too long (a line cut by its reader).
EncodedCorpus encode_pairs(const std::vector<std::string>& src, const std::vector<std::string>& tgt,
                           int64_t first_line, const Tokenizer& src_tok, const Tokenizer& tgt_tok,
                           const CorpusOptions& options, const std::vector<char>& overlong = {});

// Throws std::runtime_error with both file names and both line counts when the line counts
// differ (before any encoding); otherwise encode_pairs() of every line.
EncodedCorpus load_parallel_corpus(const std::string& src_path, const std::string& tgt_path,
                                   const Tokenizer& src_tok, const Tokenizer& tgt_tok, const CorpusOptions& options);

// "line counts differ: 'A' has N lines, 'B' has M (the files must be sentence-aligned)"
std::string line_count_mismatch(const std::string& src_path, int64_t src_lines, const std::string& tgt_path,
                                 int64_t tgt_lines);

}  // namespace torchmt
