#include "data/parallel_corpus.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <ATen/ATen.h>

#include "data/text_file.h"
#include "util/utf8.h"
#include "torchmt/util/strings.h"

namespace torchmt {


CorpusStats& CorpusStats::operator+=(const CorpusStats& o) {
  total += o.total;
  kept += o.kept;
  too_long += o.too_long;
  empty += o.empty;
  invalid_utf8 += o.invalid_utf8;
  return *this;
}

void EncodedCorpus::copy_src(int64_t i, int64_t* out) const { std::copy(at(i).src.begin(), at(i).src.end(), out); }
void EncodedCorpus::copy_tgt(int64_t i, int64_t* out) const { std::copy(at(i).tgt.begin(), at(i).tgt.end(), out); }

std::string CorpusStats::summary() const {
  return "kept " + with_thousands(kept) + " of " + with_thousands(total) + " pairs: " + with_thousands(too_long) +
         " too long, " + with_thousands(empty) + " empty, " + with_thousands(invalid_utf8) + " invalid UTF-8";
}

namespace {

bool blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

enum class Verdict : uint8_t { kKept, kInvalidUtf8, kEmpty, kTooLong };

std::vector<int32_t> to_int32(const std::vector<int64_t>& ids) { return std::vector<int32_t>(ids.begin(), ids.end()); }

}  // namespace

EncodedCorpus encode_pairs(const std::vector<std::string>& src, const std::vector<std::string>& tgt,
                           int64_t first_line, const Tokenizer& src_tok, const Tokenizer& tgt_tok,
                           const CorpusOptions& options, const std::vector<char>& overlong) {
  if (src.size() != tgt.size()) throw std::invalid_argument("encode_pairs: sides differ in length");
  if (!overlong.empty() && overlong.size() != src.size())
    throw std::invalid_argument("encode_pairs: one overlong flag per pair");
  const size_t n = src.size();
  std::vector<EncodedPair> encoded(n);
  std::vector<Verdict> verdicts(n, Verdict::kKept);
  auto work = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      if (!overlong.empty() && overlong[i]) {
        verdicts[i] = Verdict::kTooLong;
        continue;
      }
      if (!is_valid_utf8(src[i]) || !is_valid_utf8(tgt[i])) {
        verdicts[i] = Verdict::kInvalidUtf8;
        continue;
      }
      if (blank(src[i]) || blank(tgt[i])) {
        verdicts[i] = Verdict::kEmpty;
        continue;
      }
      auto& p = encoded[i];
      p.index = first_line + static_cast<int64_t>(i);
      p.src = to_int32(src_tok.encode(src[i]));
      p.tgt = to_int32(tgt_tok.encode(tgt[i]));
      if (p.src.empty() || p.tgt.empty()) {
        verdicts[i] = Verdict::kEmpty;  // only characters the normaliser removes
      } else if (static_cast<int64_t>(p.src.size()) + 1 > options.max_sentence_tokens ||
                 static_cast<int64_t>(p.tgt.size()) + 1 > options.max_sentence_tokens) {
        verdicts[i] = Verdict::kTooLong;  // +1: the eos (src) or bos (tgt) each side carries
      }
    }
  };
  // SentencePiece's Encode is const and thread-safe: split the lines into contiguous chunks.
  size_t threads = options.num_threads > 0 ? static_cast<size_t>(options.num_threads)
                                           : std::max(1u, std::thread::hardware_concurrency());
  threads = std::max<size_t>(1, std::min(threads, n / 1000 + 1));
  std::vector<std::thread> pool;
  const size_t chunk = (n + threads - 1) / threads;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work, std::min(n, t * chunk), std::min(n, (t + 1) * chunk));
  work(0, std::min(n, chunk));
  for (auto& th : pool) th.join();

  EncodedCorpus corpus;
  corpus.stats.total = static_cast<int64_t>(n);
  for (size_t i = 0; i < n; ++i) {
    switch (verdicts[i]) {
      case Verdict::kKept:
        corpus.pairs.push_back(std::move(encoded[i]));
        break;
      case Verdict::kInvalidUtf8:
        ++corpus.stats.invalid_utf8;
        break;
      case Verdict::kEmpty:
        ++corpus.stats.empty;
        break;
      case Verdict::kTooLong:
        ++corpus.stats.too_long;
        break;
    }
  }
  corpus.stats.kept = static_cast<int64_t>(corpus.pairs.size());
  return corpus;
}

std::string line_count_mismatch(const std::string& src_path, int64_t src_lines, const std::string& tgt_path,
                                 int64_t tgt_lines) {
  return "line counts differ: '" + src_path + "' has " + with_thousands(src_lines) + " lines, '" + tgt_path +
         "' has " + with_thousands(tgt_lines) + " (the files must be sentence-aligned)";
}

EncodedCorpus load_parallel_corpus(const std::string& src_path, const std::string& tgt_path,
                                   const Tokenizer& src_tok, const Tokenizer& tgt_tok, const CorpusOptions& options) {
  if (options.max_sentence_tokens < 2) throw std::invalid_argument("max_sentence_tokens must be at least 2, got " + std::to_string(options.max_sentence_tokens));
  for (const auto& path : {src_path, tgt_path}) {
    if (!std::filesystem::exists(path)) throw std::runtime_error("corpus file '" + path + "' not found");
  }
  // Both sides are read before anything is encoded, so a misaligned pair of files fails at once.
  std::vector<std::string> src = read_lines(src_path);
  std::vector<std::string> tgt = read_lines(tgt_path);
  if (src.size() != tgt.size())
    throw std::runtime_error(line_count_mismatch(src_path, static_cast<int64_t>(src.size()), tgt_path,
                                                 static_cast<int64_t>(tgt.size())));
  return encode_pairs(src, tgt, 0, src_tok, tgt_tok, options);
}

at::Tensor target_ids(const std::vector<const PairSource*>& corpora, int64_t vocab, const SpecialIds& special) {
  at::Tensor seen = at::zeros({vocab}, at::kBool);
  bool* flags = seen.data_ptr<bool>();
  auto mark = [&](int64_t id) {
    if (id >= 0 && id < vocab) flags[id] = true;
  };
  std::vector<int64_t> ids;
  for (const PairSource* corpus : corpora) {
    for (int64_t i = 0; i < corpus->size(); ++i) {
      ids.resize(static_cast<size_t>(corpus->tgt_length(i)));
      corpus->copy_tgt(i, ids.data());
      for (int64_t id : ids) mark(id);
    }
    corpus->release_pages();
  }
  for (int64_t id : {special.pad, special.unk, special.bos, special.eos}) mark(id);
  return seen;
}

}  // namespace torchmt
