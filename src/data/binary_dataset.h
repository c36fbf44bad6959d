#pragma once
// A parallel corpus encoded once into a directory and memory-mapped by every run that trains on
// it (fairseq's mmap dataset, Marian's binary corpus): memory does not grow with the corpus.
//
//   manifest.json   sizes, counts, the tokenizer's checksum and a CRC-32C of every file below;
//                   written last, so a directory without it is an interrupted `preprocess`
//   src.tokens      every kept source sentence's ids, back to back (uint16 when the vocabulary
//   tgt.tokens      fits, else uint32), without bos/eos
//   offsets.bin     uint64 [pairs + 1][2]: where pair i starts in src.tokens and tgt.tokens
//   lengths.bin     uint16 [pairs][2]: source and target lengths (what the batcher sorts by)
//   lines.bin       uint64 [pairs]: the pair's 0-based line in the original files
//   spm.model       the SentencePiece model the ids belong to
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/parallel_corpus.h"

namespace torchmt {

// A text file a dataset was encoded from: a cached dataset is stale when it changed.
struct DatasetInput {
  std::string path;  // absolute
  uint64_t bytes = 0, hash = 0;
  bool operator==(const DatasetInput& o) const { return path == o.path && bytes == o.bytes && hash == o.hash; }
};

struct DatasetManifest {
  int64_t pairs = 0, src_tokens = 0, tgt_tokens = 0;
  int64_t token_bytes = 2;  // 2: uint16 ids, 4: uint32
  int64_t vocab_size = 0, max_sentence_tokens = 0;
  std::string tokenizer_checksum;
  CorpusStats stats;
  DatasetInput src, tgt;
  struct File {
    std::string name;
    uint64_t bytes = 0;
    uint32_t crc32c = 0;
  };
  std::vector<File> files;
};

struct PreprocessOptions {
  CorpusOptions corpus;          // max_sentence_tokens, encoding threads
  int64_t chunk_pairs = 1 << 16;  // lines read, encoded and written at a time: bounds the memory
  // Called once with the line count (before encoding), then after every chunk with its lines.
  std::function<void(int64_t lines)> lines_counted, lines_done;
  // Asked between chunks (about a second apart): true ends the work with StopRequested
  // (util/stop_signals.h), the partial directory removed.
  std::function<bool()> should_stop;
};

// Streams both files through their tokenizers (the source's and the target's; one for a joint
// vocabulary) into `dir`, which must not exist: built in
// `dir.partial` (removed first when a crashed run left one) and renamed to `dir` once
// complete, so a kill at any moment leaves no directory that opens as a dataset. Line counts
// are compared before anything is encoded.
DatasetManifest preprocess_corpus(const std::string& src_path, const std::string& tgt_path,
                                  const Tokenizer& src_tokenizer, const Tokenizer& tgt_tokenizer,
                                  const std::string& dir, const PreprocessOptions& options);
inline DatasetManifest preprocess_corpus(const std::string& src_path, const std::string& tgt_path,
                                         const Tokenizer& tokenizer, const std::string& dir,
                                         const PreprocessOptions& options) {
  return preprocess_corpus(src_path, tgt_path, tokenizer, tokenizer, dir, options);
}

class BinaryDataset final : public PairSource {
 public:
  // Throws DamagedFileError naming the file for an incomplete directory (no manifest), a file
  // whose size differs from the manifest (truncated, appended) or, with `verify`, whose
  // CRC-32C differs (read once with plain reads, so checking maps nothing into memory).
  static std::unique_ptr<BinaryDataset> open(const std::string& dir, bool verify = true);
  ~BinaryDataset() override;
  BinaryDataset(const BinaryDataset&) = delete;
  BinaryDataset& operator=(const BinaryDataset&) = delete;

  int64_t size() const override { return manifest_.pairs; }
  int64_t src_length(int64_t i) const override { return lengths_[2 * i]; }
  int64_t tgt_length(int64_t i) const override { return lengths_[2 * i + 1]; }
  void copy_src(int64_t i, int64_t* out) const override;
  void copy_tgt(int64_t i, int64_t* out) const override;
  int64_t line(int64_t i) const override { return static_cast<int64_t>(lines_[i]); }

  const DatasetManifest& manifest() const { return manifest_; }
  const std::string& dir() const { return dir_; }
  std::string tokenizer_path() const { return dir_ + "/spm.model"; }
  // Drops the mapped pages from this process's resident set (they stay in the page cache, so
  // the next read is a minor fault): the batcher calls it between windows, which keeps RSS
  // flat however much of the corpus a run has read.
  void release_pages() const override;

 private:
  struct Mapping;
  BinaryDataset() = default;
  std::string dir_;
  DatasetManifest manifest_;
  std::vector<std::unique_ptr<Mapping>> mappings_;
  const uint8_t* src_ = nullptr;
  const uint8_t* tgt_ = nullptr;
  const uint64_t* offsets_ = nullptr;
  const uint16_t* lengths_ = nullptr;
  const uint64_t* lines_ = nullptr;
};

// Training on raw text: the dataset for these inputs under `cache_dir`, reused while the inputs
// (path, size, content hash), the tokenizer and max_sentence_tokens match, built (or rebuilt,
// when stale or damaged) otherwise. `what_happened` says which, for the log.
std::unique_ptr<BinaryDataset> cached_dataset(const std::string& src_path, const std::string& tgt_path,
                                              const Tokenizer& src_tokenizer, const Tokenizer& tgt_tokenizer,
                                              const std::string& cache_dir,
                                              const PreprocessOptions& options, std::string& what_happened);

// The content hash a cached dataset is keyed by (64-bit, word at a time).
uint64_t hash_file(const std::string& path);

}  // namespace torchmt
