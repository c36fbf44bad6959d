#pragma once
// Reading a sentence-aligned parallel corpus into token ids: strict about alignment,
// explicit about what it skips, and cached so that a second run starts at once.
#include <cstdint>
#include <string>
#include <vector>

#include "torchmt/data/tokenizer.h"

namespace torchmt {

struct EncodedPair {
  std::vector<int32_t> src, tgt;  // without bos/eos
  int64_t index = 0;              // 0-based line number in the original files
};

struct CorpusStats {
  int64_t total = 0, kept = 0, too_long = 0, empty = 0, invalid_utf8 = 0;
  // "kept 28,962 of 29,000 pairs: 31 too long, 7 empty, 0 invalid UTF-8"
  std::string summary() const;
};

struct EncodedCorpus {
  std::vector<EncodedPair> pairs;  // in file order
  CorpusStats stats;
  bool from_cache = false;  // true when the cache answered
};

struct CorpusOptions {
  // A pair is skipped as too long when either side, with the eos/bos it carries in a
  // batch, exceeds this many tokens. Nothing is ever truncated.
  int64_t max_sentence_tokens = 256;
  std::string cache_dir;  // empty = no cache
  int num_threads = 0;    // encoding threads; 0: hardware concurrency
};

// Throws std::runtime_error with both file names and both line counts when the line counts
// differ (before any encoding). Pairs with invalid UTF-8 (either side), an empty side or a
// side over max_sentence_tokens are skipped and counted in `stats`.
// With a cache_dir, the encoded corpus is stored there (binary, versioned) and reused while
// both input files (path, size, content hash), both tokenizers (checksum) and max_sentence_tokens match.
EncodedCorpus load_parallel_corpus(const std::string& src_path, const std::string& tgt_path,
                                   const Tokenizer& src_tok, const Tokenizer& tgt_tok, const CorpusOptions& options);

// The cache file load_parallel_corpus uses for these inputs (whether or not it exists).
std::string corpus_cache_path(const std::string& src_path, const std::string& tgt_path, const Tokenizer& src_tok,
                              const Tokenizer& tgt_tok, const CorpusOptions& options);


}  // namespace torchmt
