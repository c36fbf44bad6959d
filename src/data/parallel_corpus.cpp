#include "torchmt/data/parallel_corpus.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "torchmt/data/text_file.h"
#include "torchmt/util/utf8.h"
#include "torchmt/util/strings.h"
#include "torchmt/util/atomic_file.h"
#include "torchmt/util/integrity.h"

namespace torchmt {


std::string CorpusStats::summary() const {
  return "kept " + with_thousands(kept) + " of " + with_thousands(total) + " pairs: " + with_thousands(too_long) +
         " too long, " + with_thousands(empty) + " empty, " + with_thousands(invalid_utf8) + " invalid UTF-8";
}

namespace {

namespace fs = std::filesystem;

// --- cache format ----------------------------------------------------------------------
// "TMTCORPUS" magic, u32 version, then the key the cache was built for (strings and
// integers), the stats, and the pairs as one flat id array with per-pair lengths, so that
// loading is a few bulk reads, and a CRC-32C of all that as the last 4 bytes (version 2), so
// that a damaged cache is encoded again instead of training on wrong ids. Native byte order:
// a cache is a local artifact.
constexpr char kMagic[] = "TMTCORPUS";
constexpr uint32_t kCacheVersion = 2;

// Content hash for cache keys: 64-bit, word-at-a-time (FNV is too slow on big corpora).
uint64_t hash_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read '" + path + "'");
  std::vector<char> buffer(1 << 20);
  uint64_t h = 0x9E3779B97F4A7C15ULL;
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    size_t n = static_cast<size_t>(in.gcount());
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, buffer.data() + i, 8);
      h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
      h ^= h >> 29;
    }
    for (; i < n; ++i) h = (h ^ static_cast<unsigned char>(buffer[i])) * 0x100000001B3ULL;
  }
  return h;
}

struct CacheKey {
  std::string src_path, tgt_path, src_tok, tgt_tok;
  uint64_t src_size = 0, tgt_size = 0, src_hash = 0, tgt_hash = 0;
  int64_t max_sentence_tokens = 0;
  bool operator==(const CacheKey& o) const {
    return src_path == o.src_path && tgt_path == o.tgt_path && src_tok == o.src_tok && tgt_tok == o.tgt_tok &&
           src_size == o.src_size && tgt_size == o.tgt_size && src_hash == o.src_hash && tgt_hash == o.tgt_hash &&
           max_sentence_tokens == o.max_sentence_tokens;
  }
};

std::string absolute(const std::string& path) { return fs::weakly_canonical(fs::absolute(path)).string(); }

CacheKey make_key(const std::string& src, const std::string& tgt, const Tokenizer& st, const Tokenizer& tt,
                  int64_t max_sentence_tokens) {
  CacheKey k;
  k.src_path = absolute(src);
  k.tgt_path = absolute(tgt);
  k.src_tok = st.checksum();
  k.tgt_tok = tt.checksum();
  k.src_size = fs::file_size(src);
  k.tgt_size = fs::file_size(tgt);
  k.src_hash = hash_file(src);
  k.tgt_hash = hash_file(tgt);
  k.max_sentence_tokens = max_sentence_tokens;
  return k;
}

class Writer {
 public:
  explicit Writer(std::ostream& out) : out_(out) {}
  template <typename T>
  void pod(const T& v) {
    out_.write(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    out_.write(s.data(), static_cast<std::streamsize>(s.size()));
  }
  template <typename T>
  void vec(const std::vector<T>& v) {
    pod<uint64_t>(v.size());
    out_.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
  }

 private:
  std::ostream& out_;
};

class Reader {
 public:
  explicit Reader(std::istream& in) : in_(in) {}
  template <typename T>
  T pod() {
    T v{};
    in_.read(reinterpret_cast<char*>(&v), sizeof(T));
    check();
    return v;
  }
  std::string str() {
    auto n = pod<uint64_t>();
    if (n > (1u << 20)) throw std::runtime_error("corrupt");
    std::string s(n, '\0');
    in_.read(s.data(), static_cast<std::streamsize>(n));
    check();
    return s;
  }
  template <typename T>
  std::vector<T> vec(uint64_t limit) {
    auto n = pod<uint64_t>();
    if (n > limit) throw std::runtime_error("corrupt");
    std::vector<T> v(n);
    in_.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(T)));
    check();
    return v;
  }

 private:
  void check() {
    if (!in_) throw std::runtime_error("truncated");
  }
  std::istream& in_;
};

void write_key(Writer& w, const CacheKey& k) {
  w.str(k.src_path);
  w.str(k.tgt_path);
  w.str(k.src_tok);
  w.str(k.tgt_tok);
  w.pod(k.src_size);
  w.pod(k.tgt_size);
  w.pod(k.src_hash);
  w.pod(k.tgt_hash);
  w.pod(k.max_sentence_tokens);
}

CacheKey read_key(Reader& r) {
  CacheKey k;
  k.src_path = r.str();
  k.tgt_path = r.str();
  k.src_tok = r.str();
  k.tgt_tok = r.str();
  k.src_size = r.pod<uint64_t>();
  k.tgt_size = r.pod<uint64_t>();
  k.src_hash = r.pod<uint64_t>();
  k.tgt_hash = r.pod<uint64_t>();
  k.max_sentence_tokens = r.pod<int64_t>();
  return k;
}

// The cached corpus, or false when there is none, it is stale (key differs) or unreadable;
// a bad cache is never an error, only a reason to encode again.
bool read_cache(const std::string& path, const CacheKey& key, EncodedCorpus& corpus) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return false;
  try {
    std::string content = read_file(path);
    const size_t header = sizeof(kMagic) + sizeof(uint32_t);
    uint32_t version = 0, stored = 0;
    if (content.size() < header + sizeof(stored) || std::memcmp(content.data(), kMagic, sizeof(kMagic)) != 0)
      return false;
    std::memcpy(&version, content.data() + sizeof(kMagic), sizeof(version));
    if (version != kCacheVersion) return false;  // an older format: encode again
    std::memcpy(&stored, content.data() + content.size() - sizeof(stored), sizeof(stored));
    content.resize(content.size() - sizeof(stored));
    if (crc32c(content) != stored) {
      std::cerr << "warning: corpus cache " << path << " is damaged (checksum mismatch): encoding again\n";
      return false;
    }
    std::istringstream in(std::move(content), std::ios::binary);
    in.seekg(static_cast<std::streamoff>(header));
    Reader r(in);
    if (!(read_key(r) == key)) return false;
    CorpusStats s;
    s.total = r.pod<int64_t>();
    s.kept = r.pod<int64_t>();
    s.too_long = r.pod<int64_t>();
    s.empty = r.pod<int64_t>();
    s.invalid_utf8 = r.pod<int64_t>();
    const uint64_t limit = static_cast<uint64_t>(s.total) + 1;
    auto indices = r.vec<int64_t>(limit);
    auto src_lens = r.vec<uint32_t>(limit);
    auto tgt_lens = r.vec<uint32_t>(limit);
    auto ids = r.vec<int32_t>(uint64_t{1} << 40);
    if (indices.size() != static_cast<size_t>(s.kept) || src_lens.size() != indices.size() ||
        tgt_lens.size() != indices.size()) {
      return false;
    }
    std::vector<EncodedPair> pairs(indices.size());
    size_t offset = 0;
    for (size_t i = 0; i < pairs.size(); ++i) {
      if (offset + src_lens[i] + tgt_lens[i] > ids.size()) return false;
      pairs[i].index = indices[i];
      pairs[i].src.assign(ids.begin() + offset, ids.begin() + offset + src_lens[i]);
      offset += src_lens[i];
      pairs[i].tgt.assign(ids.begin() + offset, ids.begin() + offset + tgt_lens[i]);
      offset += tgt_lens[i];
    }
    if (offset != ids.size()) return false;
    corpus.pairs = std::move(pairs);
    corpus.stats = s;
    corpus.from_cache = true;
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

void write_cache(const std::string& path, const CacheKey& key, const EncodedCorpus& corpus) {
  fs::create_directories(fs::path(path).parent_path());
  // Written aside and renamed (atomic_write): a crash mid-write leaves no half cache.
  std::ostringstream out(std::ios::binary);
  {
    Writer w(out);
    out.write(kMagic, sizeof(kMagic));
    w.pod(kCacheVersion);
    write_key(w, key);
    const auto& s = corpus.stats;
    for (int64_t v : {s.total, s.kept, s.too_long, s.empty, s.invalid_utf8}) w.pod(v);
    std::vector<int64_t> indices;
    std::vector<uint32_t> src_lens, tgt_lens;
    std::vector<int32_t> ids;
    for (const auto& p : corpus.pairs) {
      indices.push_back(p.index);
      src_lens.push_back(static_cast<uint32_t>(p.src.size()));
      tgt_lens.push_back(static_cast<uint32_t>(p.tgt.size()));
      ids.insert(ids.end(), p.src.begin(), p.src.end());
      ids.insert(ids.end(), p.tgt.begin(), p.tgt.end());
    }
    w.vec(indices);
    w.vec(src_lens);
    w.vec(tgt_lens);
    w.vec(ids);
  }
  std::string bytes = out.str();
  const uint32_t crc = crc32c(bytes);
  bytes.append(reinterpret_cast<const char*>(&crc), sizeof(crc));
  atomic_write(path, bytes);
}

bool blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

enum class Verdict : uint8_t { kKept, kInvalidUtf8, kEmpty, kTooLong };

std::vector<int32_t> to_int32(const std::vector<int64_t>& ids) { return std::vector<int32_t>(ids.begin(), ids.end()); }

EncodedCorpus encode_corpus(const std::vector<std::string>& src, const std::vector<std::string>& tgt,
                            const Tokenizer& src_tok, const Tokenizer& tgt_tok, const CorpusOptions& options) {
  const size_t n = src.size();
  std::vector<EncodedPair> encoded(n);
  std::vector<Verdict> verdicts(n, Verdict::kKept);
  auto work = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      if (!is_valid_utf8(src[i]) || !is_valid_utf8(tgt[i])) {
        verdicts[i] = Verdict::kInvalidUtf8;
        continue;
      }
      if (blank(src[i]) || blank(tgt[i])) {
        verdicts[i] = Verdict::kEmpty;
        continue;
      }
      auto& p = encoded[i];
      p.index = static_cast<int64_t>(i);
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

}  // namespace

std::string corpus_cache_path(const std::string& src_path, const std::string& tgt_path, const Tokenizer& src_tok,
                              const Tokenizer& tgt_tok, const CorpusOptions& options) {
  // One file per (inputs, tokenizers, max_sentence_tokens): switching between corpora keeps both caches.
  const std::string id = fnv1a_hex(absolute(src_path) + '\n' + absolute(tgt_path) + '\n' + src_tok.checksum() +
                                   '\n' + tgt_tok.checksum() + '\n' + std::to_string(options.max_sentence_tokens));
  return (fs::path(options.cache_dir) / (fs::path(src_path).filename().string() + "." + id + ".corpus")).string();
}

EncodedCorpus load_parallel_corpus(const std::string& src_path, const std::string& tgt_path,
                                   const Tokenizer& src_tok, const Tokenizer& tgt_tok, const CorpusOptions& options) {
  if (options.max_sentence_tokens < 2) throw std::invalid_argument("max_sentence_tokens must be at least 2, got " + std::to_string(options.max_sentence_tokens));
  for (const auto& path : {src_path, tgt_path}) {
    if (!fs::exists(path)) throw std::runtime_error("corpus file '" + path + "' not found");
  }
  std::string cache_path;
  CacheKey key;
  if (!options.cache_dir.empty()) {
    cache_path = corpus_cache_path(src_path, tgt_path, src_tok, tgt_tok, options);
    key = make_key(src_path, tgt_path, src_tok, tgt_tok, options.max_sentence_tokens);
    EncodedCorpus cached;
    if (read_cache(cache_path, key, cached)) return cached;
  }
  // Both sides are read before anything is encoded, so a misaligned pair of files fails at once.
  std::vector<std::string> src = read_lines(src_path);
  std::vector<std::string> tgt = read_lines(tgt_path);
  if (src.size() != tgt.size()) {
    throw std::runtime_error("line counts differ: '" + src_path + "' has " + with_thousands(src.size()) +
                             " lines, '" + tgt_path + "' has " + with_thousands(tgt.size()) +
                             " (the files must be sentence-aligned)");
  }
  EncodedCorpus corpus = encode_corpus(src, tgt, src_tok, tgt_tok, options);
  if (!cache_path.empty()) write_cache(cache_path, key, corpus);
  return corpus;
}

}  // namespace torchmt
