#include "data/shortlist.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "torchmt/data/special_ids.h"
#include "util/atomic_file.h"
#include "util/integrity.h"

namespace torchmt {
namespace {

// Format 2 ends with "end N" (the lists' count) and a checksum line, so that a truncated or
// damaged file is an error instead of fewer candidates.
constexpr const char* kMagic = "torchmt-shortlist 2";

// The distinct ids of a sentence, sorted.
std::vector<int64_t> distinct(std::vector<int64_t> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace

Shortlist Shortlist::build(const PairSource& corpus, const Tokenizer& src_tok, const Tokenizer& tgt_tok,
                           const ShortlistOptions& options) {
  if (options.per_source < 0 || options.frequent < 0 || options.min_count < 1)
    throw std::invalid_argument("shortlist: per_source and frequent must not be negative, min_count at least 1");
  Shortlist s;
  s.options_ = options;
  s.source_special_ = src_tok.special_ids();
  s.target_special_ = tgt_tok.special_ids();
  s.src_checksum_ = src_tok.checksum();
  s.tgt_checksum_ = tgt_tok.checksum();
  s.target_vocab_ = tgt_tok.vocab_size();
  const int64_t source_vocab = src_tok.vocab_size();
  std::vector<int64_t> target_count(static_cast<size_t>(s.target_vocab_));
  std::unordered_map<uint64_t, int64_t> pair_count;  // s * V_t + t -> sentences holding both
  std::vector<int64_t> src, tgt;
  for (int64_t i = 0; i < corpus.size(); ++i) {
    src.resize(static_cast<size_t>(corpus.src_length(i)));
    tgt.resize(static_cast<size_t>(corpus.tgt_length(i)));
    corpus.copy_src(i, src.data());
    corpus.copy_tgt(i, tgt.data());
    const auto a = distinct(src), b = distinct(tgt);
    for (int64_t y : b)
      if (y >= 0 && y < s.target_vocab_) ++target_count[static_cast<size_t>(y)];
    for (int64_t x : a)
      for (int64_t y : b)
        if (x >= 0 && x < source_vocab && y >= 0 && y < s.target_vocab_)
          ++pair_count[static_cast<uint64_t>(x) * static_cast<uint64_t>(s.target_vocab_) + static_cast<uint64_t>(y)];
  }
  // The frequent set: specials, then the most frequent target pieces (ties by id).
  std::vector<int32_t> by_count(static_cast<size_t>(s.target_vocab_));
  std::iota(by_count.begin(), by_count.end(), 0);
  std::stable_sort(by_count.begin(), by_count.end(), [&](int32_t a, int32_t b) {
    return target_count[static_cast<size_t>(a)] > target_count[static_cast<size_t>(b)];
  });
  std::vector<bool> is_frequent(static_cast<size_t>(s.target_vocab_), false);
  for (int64_t id : {s.target_special_.unk, s.target_special_.eos})
    if (id < s.target_vocab_) is_frequent[static_cast<size_t>(id)] = true;
  for (int64_t j = 0; j < std::min<int64_t>(options.frequent, s.target_vocab_); ++j)
    if (target_count[static_cast<size_t>(by_count[static_cast<size_t>(j)])] > 0)
      is_frequent[static_cast<size_t>(by_count[static_cast<size_t>(j)])] = true;
  for (int32_t t = 0; t < s.target_vocab_; ++t)
    if (is_frequent[static_cast<size_t>(t)]) s.frequent_.push_back(t);
  // Each source piece's best p(t | s) outside the frequent set.
  std::vector<std::vector<std::pair<int64_t, int32_t>>> seen(static_cast<size_t>(source_vocab));  // (count, t)
  for (const auto& [key, count] : pair_count) {
    const auto x = static_cast<size_t>(key / static_cast<uint64_t>(s.target_vocab_));
    const auto y = static_cast<int32_t>(key % static_cast<uint64_t>(s.target_vocab_));
    if (count >= options.min_count && !is_frequent[static_cast<size_t>(y)]) seen[x].emplace_back(count, y);
  }
  s.lists_.resize(static_cast<size_t>(source_vocab));
  for (size_t x = 0; x < seen.size(); ++x) {
    auto& v = seen[x];
    // c(s) is the same for every t of s: ranking by c(s, t) is ranking by p(t | s).
    const auto keep = std::min<size_t>(v.size(), static_cast<size_t>(options.per_source));
    std::partial_sort(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(keep), v.end(),
                      [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
    for (size_t j = 0; j < keep; ++j) s.lists_[x].push_back(v[j].second);
    std::sort(s.lists_[x].begin(), s.lists_[x].end());
  }
  return s;
}

void Shortlist::save(const std::string& path) const {
  std::ostringstream out;
  out << kMagic << "\n";
  out << "source_vocabulary " << src_checksum_ << " " << lists_.size() << "\n";
  out << "target_vocabulary " << tgt_checksum_ << " " << target_vocab_ << "\n";
  out << "options per_source=" << options_.per_source << " frequent=" << options_.frequent
      << " min_count=" << options_.min_count << "\n";
  out << "frequent";
  for (int32_t t : frequent_) out << ' ' << t;
  out << "\n";
  int64_t written = 0;
  for (size_t x = 0; x < lists_.size(); ++x) {
    if (lists_[x].empty()) continue;
    out << x << '\t';
    for (size_t j = 0; j < lists_[x].size(); ++j) out << (j ? " " : "") << lists_[x][j];
    out << "\n";
    ++written;
  }
  out << "end " << written << "\n";
  atomic_write(path, seal_text(out.str()));
}

Shortlist Shortlist::load(const std::string& path, const Tokenizer& src_tok, const Tokenizer& tgt_tok) {
  // The checksum line (a flipped digit would be another candidate); a file without one (edited
  // by hand, as the mismatch error suggests) still has to reach its "end" line.
  std::istringstream in(verify_text_seal(read_file(path), "shortlist", path));
  int64_t line_number = 0;
  std::string line;
  auto fail = [&](const std::string& what) -> std::runtime_error {
    return std::runtime_error("shortlist " + path + " line " + std::to_string(line_number) + ": " + what);
  };
  auto next = [&](const char* what) {
    ++line_number;
    if (!std::getline(in, line)) throw fail(std::string("missing ") + what);
  };
  next("header");
  if (line == "torchmt-shortlist 1")
    throw std::runtime_error("shortlist " + path +
                             " is of format 1, which cannot tell a truncated file: rebuild it with `torchmt shortlist`");
  if (line != kMagic) throw std::runtime_error(path + " is not a torchmt shortlist (made by `torchmt shortlist`)");
  Shortlist s;
  s.source_special_ = src_tok.special_ids();
  s.target_special_ = tgt_tok.special_ids();
  int64_t source_vocab = 0;
  auto vocabulary = [&](const char* key, std::string& checksum, int64_t& size, const Tokenizer& tok, const char* side) {
    next(key);
    std::istringstream fields(line);
    std::string name;
    if (!(fields >> name >> checksum >> size) || name != key || size < 0 || size > (int64_t{1} << 24))
      throw fail(std::string("expected '") + key + " CHECKSUM SIZE'");
    if (checksum != tok.checksum() || size != tok.vocab_size())
      throw std::runtime_error("shortlist " + path + " was built for another " + side +
                               " vocabulary than this model's (rebuild it with `torchmt shortlist -m MODEL`)");
  };
  vocabulary("source_vocabulary", s.src_checksum_, source_vocab, src_tok, "source");
  vocabulary("target_vocabulary", s.tgt_checksum_, s.target_vocab_, tgt_tok, "target");
  next("options");
  if (std::sscanf(line.c_str(), "options per_source=%" SCNd64 " frequent=%" SCNd64 " min_count=%" SCNd64, &s.options_.per_source,
                  &s.options_.frequent, &s.options_.min_count) != 3)
    throw fail("expected 'options per_source=N frequent=N min_count=N'");
  auto read_ids = [&](std::istringstream& fields, std::vector<int32_t>& ids) {
    int64_t t = 0;
    while (fields >> t) {
      if (t < 0 || t >= s.target_vocab_) throw fail("target id " + std::to_string(t) + " outside the vocabulary");
      ids.push_back(static_cast<int32_t>(t));
    }
    if (!fields.eof()) throw fail("not a list of target ids");
    std::sort(ids.begin(), ids.end());
  };
  next("frequent");
  {
    std::istringstream fields(line);
    std::string name;
    if (!(fields >> name) || name != "frequent") throw fail("expected 'frequent ID...'");
    read_ids(fields, s.frequent_);
  }
  s.lists_.resize(static_cast<size_t>(source_vocab));
  int64_t listed = 0;
  bool ended = false;
  while (std::getline(in, line)) {
    ++line_number;
    if (ended && line.rfind("# torchmt-crc32c", 0) == 0) throw fail("its checksum line is cut short or altered");
    if (ended) throw fail("text after the 'end' line");
    if (line.rfind("end ", 0) == 0) {
      char* end = nullptr;
      const long long count = std::strtoll(line.c_str() + 4, &end, 10);
      if (end == line.c_str() + 4 || *end != '\0' || count != listed)
        throw fail("'" + line.substr(0, 40) + "' but the file lists " + std::to_string(listed) + " source pieces");
      ended = true;
      continue;
    }
    ++listed;
    const auto tab = line.find('\t');
    char* end = nullptr;
    const long long x = std::strtoll(line.c_str(), &end, 10);
    if (tab == std::string::npos || end != line.c_str() + tab || x < 0 || x >= source_vocab)
      throw fail("expected 'SOURCE_ID<TAB>TARGET_ID...' with a source id below " + std::to_string(source_vocab));
    std::istringstream fields(line.substr(tab + 1));
    auto& list = s.lists_[static_cast<size_t>(x)];
    list.clear();
    read_ids(fields, list);
  }
  if (!ended)
    throw DamagedFileError("shortlist " + path + " is truncated: it has no 'end' line (rebuild it with `torchmt shortlist`)");
  return s;
}

std::vector<int64_t> Shortlist::candidates(const std::vector<int64_t>& source_ids,
                                           const std::vector<int64_t>& extra) const {
  std::vector<int64_t> out(frequent_.begin(), frequent_.end());
  for (int64_t x : source_ids) {
    if (x == source_special_.pad || x == source_special_.eos || x < 0 || x >= source_vocab()) continue;
    const auto& list = lists_[static_cast<size_t>(x)];
    out.insert(out.end(), list.begin(), list.end());
  }
  for (int64_t t : extra)
    if (t >= 0 && t < target_vocab_) out.push_back(t);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace torchmt
