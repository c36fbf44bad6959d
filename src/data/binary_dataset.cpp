#include "data/binary_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "data/text_file.h"
#include "util/atomic_file.h"
#include "util/stop_signals.h"
#include "util/integrity.h"
#include "torchmt/util/strings.h"

namespace torchmt {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "torchmt-dataset";
constexpr int64_t kFormatVersion = 1;
constexpr const char* kSrcTokens = "src.tokens";
constexpr const char* kTgtTokens = "tgt.tokens";
constexpr const char* kOffsets = "offsets.bin";
constexpr const char* kLengths = "lengths.bin";
constexpr const char* kLines = "lines.bin";
constexpr const char* kSpm = "spm.model";

// One output file of a dataset being built: appended chunk by chunk, its CRC-32C kept as it grows.
class DatasetFile {
 public:
  DatasetFile(const std::string& dir, std::string name) : name_(std::move(name)), writer_(dir + "/" + name_) {}
  template <typename T>
  void append(const std::vector<T>& values) {
    const std::string_view bytes(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
    writer_.write(bytes);
    crc_ = crc32c(bytes, crc_);
    bytes_ += bytes.size();
  }
  DatasetManifest::File commit() {
    writer_.commit();
    return {name_, bytes_, crc_};
  }

 private:
  std::string name_;
  AtomicFileWriter writer_;
  uint32_t crc_ = 0;
  uint64_t bytes_ = 0;
};

struct Chunk {
  std::vector<std::string> src, tgt;
  std::vector<char> overlong;  // a side longer than kMaxLineBytes (cut): the pair is too long
};

// A line of more bytes cannot fit any --max-sentence-tokens (a SentencePiece piece is at most 16
// characters, 64 bytes): it is skipped as too long without being held or encoded whole.
constexpr size_t kMaxLineBytes = 1 << 20;

Chunk read_chunk(LineReader& src, LineReader& tgt, int64_t n) {
  Chunk chunk;
  std::string a, b;
  for (int64_t i = 0; i < n && src.next(a); ++i) {
    if (!tgt.next(b)) throw std::runtime_error("'" + tgt.path() + "' ended before '" + src.path() + "'");
    const bool overlong = src.truncated() || tgt.truncated();
    chunk.src.push_back(overlong ? std::string() : std::move(a));
    chunk.tgt.push_back(overlong ? std::string() : std::move(b));
    chunk.overlong.push_back(overlong);
  }
  return chunk;
}

DatasetInput describe_input(const std::string& path) {
  return {fs::weakly_canonical(fs::absolute(path)).string(), static_cast<uint64_t>(fs::file_size(path)),
          hash_file(path)};
}

nlohmann::json to_json(const DatasetManifest& m) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& f : m.files) files[f.name] = {{"bytes", f.bytes}, {"crc32c", f.crc32c}};
  auto input = [](const DatasetInput& in) {
    return nlohmann::json{{"path", in.path}, {"bytes", in.bytes}, {"hash", in.hash}};
  };
  const auto& s = m.stats;
  return {{"format", kFormat},
          {"version", kFormatVersion},
          {"pairs", m.pairs},
          {"src_tokens", m.src_tokens},
          {"tgt_tokens", m.tgt_tokens},
          {"token_bytes", m.token_bytes},
          {"vocab_size", m.vocab_size},
          {"max_sentence_tokens", m.max_sentence_tokens},
          {"tokenizer_checksum", m.tokenizer_checksum},
          {"stats",
           {{"total", s.total}, {"kept", s.kept}, {"too_long", s.too_long}, {"empty", s.empty},
            {"invalid_utf8", s.invalid_utf8}}},
          {"src", input(m.src)},
          {"tgt", input(m.tgt)},
          {"files", files}};
}

DatasetManifest from_json(const nlohmann::json& j) {
  if (j.at("format").get<std::string>() != kFormat) throw std::runtime_error("not a torchmt dataset manifest");
  if (j.at("version").get<int64_t>() != kFormatVersion)
    throw std::runtime_error("dataset format version " + std::to_string(j.at("version").get<int64_t>()) +
                             " (this torchmt reads " + std::to_string(kFormatVersion) + "): preprocess again");
  DatasetManifest m;
  m.pairs = j.at("pairs").get<int64_t>();
  m.src_tokens = j.at("src_tokens").get<int64_t>();
  m.tgt_tokens = j.at("tgt_tokens").get<int64_t>();
  m.token_bytes = j.at("token_bytes").get<int64_t>();
  m.vocab_size = j.at("vocab_size").get<int64_t>();
  m.max_sentence_tokens = j.at("max_sentence_tokens").get<int64_t>();
  m.tokenizer_checksum = j.at("tokenizer_checksum").get<std::string>();
  const auto& s = j.at("stats");
  m.stats = {s.at("total").get<int64_t>(), s.at("kept").get<int64_t>(), s.at("too_long").get<int64_t>(),
             s.at("empty").get<int64_t>(), s.at("invalid_utf8").get<int64_t>()};
  auto input = [](const nlohmann::json& in) {
    return DatasetInput{in.at("path").get<std::string>(), in.at("bytes").get<uint64_t>(), in.at("hash").get<uint64_t>()};
  };
  m.src = input(j.at("src"));
  m.tgt = input(j.at("tgt"));
  for (const auto& [name, f] : j.at("files").items())
    m.files.push_back({name, f.at("bytes").get<uint64_t>(), f.at("crc32c").get<uint32_t>()});
  return m;
}

// CRC-32C of a file with plain reads (nothing mapped, nothing kept).
uint32_t crc_of_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
  std::vector<char> buffer(4 << 20);
  uint32_t crc = 0;
  while (true) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      throw std::runtime_error("cannot read " + path + ": " + std::strerror(error));
    }
    if (n == 0) break;
    crc = crc32c(std::string_view(buffer.data(), static_cast<size_t>(n)), crc);
  }
  ::close(fd);
  return crc;
}

DatasetManifest write_dataset(const std::string& src_path, const std::string& tgt_path, int64_t src_lines,
                              const Tokenizer& src_tok, const Tokenizer& tgt_tok, const std::string& partial,
                              const PreprocessOptions& options);

}  // namespace

uint64_t hash_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read '" + path + "'");
  std::vector<char> buffer(1 << 20);
  uint64_t h = 0x9E3779B97F4A7C15ULL;
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const size_t n = static_cast<size_t>(in.gcount());
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

DatasetManifest preprocess_corpus(const std::string& src_path, const std::string& tgt_path,
                                  const Tokenizer& src_tokenizer, const Tokenizer& tgt_tokenizer,
                                  const std::string& dir, const PreprocessOptions& options) {
  const int64_t max_tokens = options.corpus.max_sentence_tokens;
  if (max_tokens < 2 || max_tokens > 65535)
    throw std::invalid_argument("max_sentence_tokens must be in [2, 65535], got " + std::to_string(max_tokens));
  if (options.chunk_pairs < 1) throw std::invalid_argument("chunk_pairs must be positive");
  for (const auto& path : {src_path, tgt_path})
    if (!fs::exists(path)) throw std::runtime_error("corpus file '" + path + "' not found");
  if (fs::exists(dir)) throw std::runtime_error("'" + dir + "' already exists: remove it or choose another output");
  // Counted first, so that misaligned files fail before minutes of encoding.
  const int64_t src_lines = count_lines(src_path), tgt_lines = count_lines(tgt_path);
  if (src_lines != tgt_lines) throw std::runtime_error(line_count_mismatch(src_path, src_lines, tgt_path, tgt_lines));
  if (options.lines_counted) options.lines_counted(src_lines);

  const std::string partial = dir + ".partial";
  // A crashed run's leftovers: never trusted, never completed. remove_tree, not fs::remove_all:
  // CUDA LibTorch's libtorch.so exports a copy of remove_all that crashes when called from here.
  if (!remove_tree(partial)) throw std::runtime_error("cannot remove " + partial + ": " + std::strerror(errno));
  fs::create_directories(partial);
  try {
    DatasetManifest m = write_dataset(src_path, tgt_path, src_lines, src_tokenizer, tgt_tokenizer, partial, options);
    fs::rename(partial, dir);
    return m;
  } catch (...) {
    remove_tree(partial);
    throw;
  }
}

namespace {

DatasetManifest write_dataset(const std::string& src_path, const std::string& tgt_path, int64_t src_lines,
                              const Tokenizer& src_tok, const Tokenizer& tgt_tok, const std::string& partial,
                              const PreprocessOptions& options) {
  const Tokenizer& tokenizer = src_tok;
  DatasetManifest m;
  m.vocab_size = std::max(src_tok.vocab_size(), tgt_tok.vocab_size());
  m.token_bytes = m.vocab_size <= 65536 ? 2 : 4;
  m.max_sentence_tokens = options.corpus.max_sentence_tokens;
  m.tokenizer_checksum = pair_checksum(src_tok, tgt_tok);
  m.src = describe_input(src_path);
  m.tgt = describe_input(tgt_path);
  {
    DatasetFile src_file(partial, kSrcTokens), tgt_file(partial, kTgtTokens), offsets(partial, kOffsets),
        lengths(partial, kLengths), lines(partial, kLines);
    LineReader src_reader(src_path), tgt_reader(tgt_path);
    src_reader.set_max_line_bytes(kMaxLineBytes);
    tgt_reader.set_max_line_bytes(kMaxLineBytes);
    uint64_t src_at = 0, tgt_at = 0;
    offsets.append(std::vector<uint64_t>{0, 0});
    auto narrow = [&](const std::vector<int32_t>& ids, std::vector<uint16_t>& u16, std::vector<uint32_t>& u32) {
      if (m.token_bytes == 2)
        u16.insert(u16.end(), ids.begin(), ids.end());
      else
        u32.insert(u32.end(), ids.begin(), ids.end());
    };
    int64_t first_line = 0;
    // The next chunk is read while this one is encoded.
    std::future<Chunk> ahead = std::async(std::launch::async, read_chunk, std::ref(src_reader), std::ref(tgt_reader),
                                          options.chunk_pairs);
    while (true) {
      Chunk chunk = ahead.get();
      if (chunk.src.empty()) break;
      ahead = std::async(std::launch::async, read_chunk, std::ref(src_reader), std::ref(tgt_reader),
                         options.chunk_pairs);
      const EncodedCorpus encoded =
          encode_pairs(chunk.src, chunk.tgt, first_line, src_tok, tgt_tok, options.corpus, chunk.overlong);
      first_line += static_cast<int64_t>(chunk.src.size());
      m.stats += encoded.stats;
      std::vector<uint16_t> s16, t16, lens;
      std::vector<uint32_t> s32, t32;
      std::vector<uint64_t> offs, line_numbers;
      for (const auto& p : encoded.pairs) {
        narrow(p.src, s16, s32);
        narrow(p.tgt, t16, t32);
        src_at += p.src.size();
        tgt_at += p.tgt.size();
        offs.insert(offs.end(), {src_at, tgt_at});
        lens.insert(lens.end(), {static_cast<uint16_t>(p.src.size()), static_cast<uint16_t>(p.tgt.size())});
        line_numbers.push_back(static_cast<uint64_t>(p.index));
      }
      if (m.token_bytes == 2) {
        src_file.append(s16);
        tgt_file.append(t16);
      } else {
        src_file.append(s32);
        tgt_file.append(t32);
      }
      offsets.append(offs);
      lengths.append(lens);
      lines.append(line_numbers);
      if (options.lines_done) options.lines_done(static_cast<int64_t>(chunk.src.size()));
      if (options.should_stop && options.should_stop()) {
        ahead.wait();  // the reader thread holds the readers
        throw StopRequested("interrupted while encoding " + src_path);
      }
    }
    if (first_line != src_lines)  // a file that changed while it was read
      throw std::runtime_error("'" + src_path + "' changed while it was read (" + with_thousands(src_lines) +
                               " lines counted, " + with_thousands(first_line) + " read)");
    std::string extra;
    if (tgt_reader.next(extra)) throw std::runtime_error("'" + tgt_path + "' has more lines than '" + src_path + "'");
    m.pairs = m.stats.kept;
    m.src_tokens = static_cast<int64_t>(src_at);
    m.tgt_tokens = static_cast<int64_t>(tgt_at);
    for (auto* file : {&src_file, &tgt_file, &offsets, &lengths, &lines}) m.files.push_back(file->commit());
  }
  atomic_write(partial + "/" + kSpm, tokenizer.serialized());
  m.files.push_back({kSpm, tokenizer.serialized().size(), crc32c(tokenizer.serialized())});
  atomic_write(partial + "/manifest.json", to_json(m).dump(2) + "\n");
  return m;
}

}  // namespace

struct BinaryDataset::Mapping {
  void* address = nullptr;
  size_t bytes = 0;
  ~Mapping() {
    if (address != nullptr) ::munmap(address, bytes);
  }
};

std::unique_ptr<BinaryDataset> BinaryDataset::open(const std::string& dir, bool verify) {
  if (!fs::is_directory(dir)) throw std::runtime_error("dataset directory '" + dir + "' not found");
  const std::string manifest_path = dir + "/manifest.json";
  if (!fs::exists(manifest_path))
    throw DamagedFileError("dataset " + dir + " is incomplete (no manifest.json: an interrupted preprocess?); run `torchmt preprocess` again");
  std::unique_ptr<BinaryDataset> d(new BinaryDataset());
  d->dir_ = dir;
  try {
    // The parser takes a NUL byte for the end of its input: what follows one would be ignored.
    const std::string text = read_file(manifest_path);
    if (text.find('\0') != std::string::npos)
      throw DamagedFileError("dataset manifest " + manifest_path + " is damaged (NUL bytes at byte " +
                             std::to_string(text.find('\0')) + ")");
    d->manifest_ = from_json(nlohmann::json::parse(text));
  } catch (const nlohmann::json::exception& e) {
    throw DamagedFileError("dataset manifest " + manifest_path + " is damaged (" + e.what() + ")");
  }
  DatasetManifest& m = d->manifest_;
  const auto n = static_cast<uint64_t>(m.pairs);
  constexpr int64_t kLimit = int64_t{1} << 40;  // so that no size below can overflow
  if (m.pairs < 0 || m.src_tokens < 0 || m.tgt_tokens < 0 || m.pairs > kLimit || m.src_tokens > kLimit ||
      m.tgt_tokens > kLimit || (m.token_bytes != 2 && m.token_bytes != 4))
    throw DamagedFileError("dataset manifest " + manifest_path + " is damaged (impossible counts)");
  // The sizes the counts imply: a manifest that disagrees with itself is damaged too.
  std::vector<std::pair<std::string, uint64_t>> expected = {
      {kSrcTokens, static_cast<uint64_t>(m.src_tokens * m.token_bytes)},
      {kTgtTokens, static_cast<uint64_t>(m.tgt_tokens * m.token_bytes)},
      {kOffsets, 16 * (n + 1)},
      {kLengths, 4 * n},
      {kLines, 8 * n}};
  // The tokenizer's size is the manifest's own word; checked like the others (train reads it).
  const auto spm = std::find_if(m.files.begin(), m.files.end(), [](const auto& file) { return file.name == kSpm; });
  if (spm != m.files.end()) expected.emplace_back(kSpm, spm->bytes);
  struct Check {
    std::string path;
    uint32_t expected;
    std::future<uint32_t> crc;
  };
  std::vector<Check> checks;  // the files are read in parallel
  for (const auto& [name, bytes] : expected) {
    const std::string path = dir + "/" + name;
    const auto f = std::find_if(m.files.begin(), m.files.end(), [&](const auto& file) { return file.name == name; });
    if (f == m.files.end() || f->bytes != bytes)
      throw DamagedFileError("dataset manifest " + manifest_path + " is damaged (" + name + " disagrees with the counts)");
    if (!fs::exists(path)) throw DamagedFileError("dataset file " + path + " is missing");
    const uint64_t actual = fs::file_size(path);
    if (actual != bytes)
      throw DamagedFileError("dataset file " + path + " is damaged: " + with_thousands(static_cast<int64_t>(actual)) +
                             " bytes, the manifest says " + with_thousands(static_cast<int64_t>(bytes)));
    if (verify) checks.push_back({path, f->crc32c, std::async(std::launch::async, crc_of_file, path)});
  }
  for (auto& check : checks)
    if (check.crc.get() != check.expected)
      throw DamagedFileError("dataset file " + check.path + " is damaged (checksum mismatch)");
  auto map = [&](const std::string& name) -> const uint8_t* {
    const std::string path = dir + "/" + name;
    const size_t bytes = fs::file_size(path);
    if (bytes == 0) return nullptr;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
    void* address = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    const int error = errno;
    ::close(fd);
    if (address == MAP_FAILED) throw std::runtime_error("cannot map " + path + ": " + std::strerror(error));
    auto mapping = std::make_unique<Mapping>();
    mapping->address = address;
    mapping->bytes = bytes;
    d->mappings_.push_back(std::move(mapping));
    return static_cast<const uint8_t*>(address);
  };
  d->src_ = map(kSrcTokens);
  d->tgt_ = map(kTgtTokens);
  d->offsets_ = reinterpret_cast<const uint64_t*>(map(kOffsets));
  d->lengths_ = reinterpret_cast<const uint16_t*>(map(kLengths));
  d->lines_ = reinterpret_cast<const uint64_t*>(map(kLines));
  if (d->offsets_[2 * n] != static_cast<uint64_t>(m.src_tokens) || d->offsets_[2 * n + 1] != static_cast<uint64_t>(m.tgt_tokens))
    throw DamagedFileError("dataset file " + dir + "/" + kOffsets + " is damaged (its last offsets disagree with the manifest)");
  return d;
}

BinaryDataset::~BinaryDataset() = default;

namespace {
void copy_ids(const uint8_t* base, int64_t token_bytes, uint64_t offset, int64_t length, int64_t* out) {
  if (token_bytes == 2) {
    const auto* ids = reinterpret_cast<const uint16_t*>(base) + offset;
    std::copy(ids, ids + length, out);
  } else {
    const auto* ids = reinterpret_cast<const uint32_t*>(base) + offset;
    std::copy(ids, ids + length, out);
  }
}
}  // namespace

void BinaryDataset::copy_src(int64_t i, int64_t* out) const {
  copy_ids(src_, manifest_.token_bytes, offsets_[2 * i], src_length(i), out);
}

void BinaryDataset::copy_tgt(int64_t i, int64_t* out) const {
  copy_ids(tgt_, manifest_.token_bytes, offsets_[2 * i + 1], tgt_length(i), out);
}

void BinaryDataset::release_pages() const {
  for (const auto& m : mappings_) ::madvise(m->address, m->bytes, MADV_DONTNEED);
}

std::unique_ptr<BinaryDataset> cached_dataset(const std::string& src_path, const std::string& tgt_path,
                                              const Tokenizer& src_tokenizer, const Tokenizer& tgt_tokenizer,
                                              const std::string& cache_dir,
                                              const PreprocessOptions& options, std::string& what_happened) {
  const std::string checksum = pair_checksum(src_tokenizer, tgt_tokenizer);
  for (const auto& path : {src_path, tgt_path})
    if (!fs::exists(path)) throw std::runtime_error("corpus file '" + path + "' not found");
  // One directory per (inputs, tokenizer, max_sentence_tokens): switching between corpora keeps both.
  const std::string id = fnv1a_hex(fs::weakly_canonical(fs::absolute(src_path)).string() + '\n' +
                                   fs::weakly_canonical(fs::absolute(tgt_path)).string() + '\n' +
                                   checksum + '\n' + std::to_string(options.corpus.max_sentence_tokens));
  const std::string dir = (fs::path(cache_dir) / (fs::path(src_path).filename().string() + "." + id + ".dataset")).string();
  what_happened = "encoded";
  if (fs::exists(dir)) {
    try {
      auto d = BinaryDataset::open(dir);
      const auto& m = d->manifest();
      if (m.src == describe_input(src_path) && m.tgt == describe_input(tgt_path) &&
          m.tokenizer_checksum == checksum && m.max_sentence_tokens == options.corpus.max_sentence_tokens) {
        what_happened = "cached";
        return d;
      }
      what_happened = "re-encoded (an input changed)";
    } catch (const DamagedFileError& e) {
      what_happened = std::string("re-encoded (") + e.what() + ")";
    }
    if (!remove_tree(dir)) throw std::runtime_error("cannot remove " + dir + ": " + std::strerror(errno));
  }
  fs::create_directories(cache_dir);
  preprocess_corpus(src_path, tgt_path, src_tokenizer, tgt_tokenizer, dir, options);
  return BinaryDataset::open(dir, /*verify=*/false);  // just written and fsync'ed
}

}  // namespace torchmt
