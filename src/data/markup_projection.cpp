#include "markup_projection.h"

#include <algorithm>

#include "torchmt/util/strings.h"
#include "util/utf8.h"

namespace torchmt {
namespace {

bool opens_word(char32_t c) {
  return c == '(' || c == '[' || c == '{' || c == '"' || c == '\'' || c == 0x201E || c == 0x201C || c == 0x201A ||
         c == 0x2018 || c == 0xAB || c == 0xBB || c == 0xBF || c == 0xA1;
}
bool closes_word(char32_t c) {
  return c == '.' || c == ',' || c == ';' || c == ':' || c == '!' || c == '?' || c == ')' || c == ']' || c == '}' ||
         c == '"' || c == '\'' || c == 0x201C || c == 0x201D || c == 0x2019 || c == 0x2018 || c == 0xBB || c == 0xAB ||
         c == 0x2026;
}

// Bytes of the punctuation run that opens `word` / closes it (a word of punctuation only: none,
// so that tags never leave it empty).
size_t leading_punctuation(std::string_view word) {
  size_t i = 0, n = 0;
  while (i < word.size() && opens_word(code_point_at(word, i, &n))) i += n;
  return i == word.size() ? 0 : i;
}
size_t trailing_punctuation(std::string_view word) {
  size_t end = word.size();
  for (size_t n = 0; end > 0 && closes_word(code_point_before(word, end, &n));) end -= n;
  return end == 0 ? 0 : word.size() - end;
}

// The steps, in order: the words of both sides and the alignment links between them; each
// element placed on a range of target words (or at a boundary between two, zero width);
// punctuation kept inside or outside as in the source; the tags due at each boundary; the text.
// Target words are numbered over the whole block (all its sentences).
class MarkupProjection {
 public:
  MarkupProjection(const TextBlock& block, const std::vector<SentenceTranslation>& translations,
                   const std::function<std::string(std::string_view)>& escape)
      : block_(block), translations_(translations), escape_(escape), n_(block.markup.size()) {
    index_words();
    if (n_ == 0) return;
    link_aligned();
    place();
    mark_punctuation();
    collect_boundaries();
  }

  std::string write() const;

 private:
  // kRanged: on target words [a, b); kChunk: zero width at boundary a (written whole with what it
  // contains); kInChunk: inside a chunk, written with it.
  enum class State { kRanged, kChunk, kInChunk };
  struct Placed {
    State state = State::kRanged;
    size_t a = 0, b = 0;
  };
  // What goes at a boundary k: closes right after word k - 1, then zero-width chunks, then opens
  // right before word k.
  struct Boundary {
    std::vector<size_t> closes, opens, middle;
  };

  const SentenceTranslation& target(size_t j) const { return translations_[block_.first_sentence + j]; }
  size_t sentences() const { return block_.spans.size(); }

  void index_words();
  void link_aligned();
  size_t boundary_at(size_t pos) const;
  bool aligned_cluster(const InlineMarkup& m, size_t& lo, size_t& hi) const;
  bool longest_free_stretch(Placed& p, int32_t parent) ;
  void place();
  void mark_punctuation();
  void collect_boundaries();
  std::string chunk(size_t e) const;
  void closes_at(size_t k, std::string& inner, std::string& outer) const;
  void opens_at(size_t k, std::string& outer, std::string& inner) const;

  const TextBlock& block_;
  const std::vector<SentenceTranslation>& translations_;
  const std::function<std::string(std::string_view)>& escape_;
  const size_t n_;  // elements

  std::vector<TextSpan> src_words_;  // in the block's text
  std::vector<size_t> src_sentence_, src_offset_, tgt_offset_;
  std::vector<std::vector<TextSpan>> tgt_words_;  // of each translation
  size_t n_target_ = 0;
  std::vector<std::vector<int32_t>> aligned_;  // source word -> target words

  std::vector<Placed> placed_;
  std::vector<std::vector<std::pair<size_t, size_t>>> children_;  // ranged children's ranges; [n_] = the root
  std::vector<char> after_lead_, before_tail_;
  std::vector<Boundary> at_;
  std::vector<std::vector<size_t>> before_close_, after_open_;  // chunks just inside a ranged element
};

// Source words of the block (numbered over the block), target words of each translation.
void MarkupProjection::index_words() {
  src_offset_.assign(sentences() + 1, 0);
  tgt_offset_.assign(sentences() + 1, 0);
  tgt_words_.resize(sentences());
  for (size_t j = 0; j < sentences(); ++j) {
    src_offset_[j] = src_words_.size();
    const auto& span = block_.spans[j];
    for (auto w : whitespace_words(std::string_view(block_.text).substr(span.begin, span.end - span.begin))) {
      src_words_.push_back({w.begin + span.begin, w.end + span.begin});
      src_sentence_.push_back(j);
    }
    tgt_words_[j] = whitespace_words(target(j).text);
    tgt_offset_[j + 1] = tgt_offset_[j] + tgt_words_[j].size();
  }
  src_offset_[sentences()] = src_words_.size();
  n_target_ = tgt_offset_[sentences()];
}

// Each source word's aligned target words; links outside the sentences are ignored.
void MarkupProjection::link_aligned() {
  aligned_.resize(src_words_.size());
  for (size_t j = 0; j < sentences(); ++j) {
    const size_t n_src = src_offset_[j + 1] - src_offset_[j];
    for (const auto& [s, t] : target(j).alignment) {
      if (s < 0 || t < 0 || static_cast<size_t>(s) >= n_src || static_cast<size_t>(t) >= tgt_words_[j].size()) continue;
      aligned_[src_offset_[j] + static_cast<size_t>(s)].push_back(
          static_cast<int32_t>(tgt_offset_[j] + static_cast<size_t>(t)));
    }
  }
}

// The target boundary for something before block text offset `pos`: before the first target
// word aligned to the source word there or to a later one of its sentence; else the end of that
// sentence's translation (of the block's, after the last word).
size_t MarkupProjection::boundary_at(size_t pos) const {
  size_t w = 0;
  while (w < src_words_.size() && src_words_[w].end <= pos) ++w;
  if (w == src_words_.size()) return n_target_;
  const size_t j = src_sentence_[w];
  for (; w < src_offset_[j + 1]; ++w)
    if (!aligned_[w].empty()) return static_cast<size_t>(*std::min_element(aligned_[w].begin(), aligned_[w].end()));
  return tgt_offset_[j + 1];
}

// The target words [lo, hi) of an element with words: the largest cluster (gaps of at most one
// word) of those aligned to its words, so that a stray link far away does not stretch it over
// the words between. False when none is aligned.
bool MarkupProjection::aligned_cluster(const InlineMarkup& m, size_t& lo, size_t& hi) const {
  if (!m.paired || m.begin >= m.end) return false;
  std::vector<size_t> targets;
  for (size_t w = 0; w < src_words_.size(); ++w) {
    if (src_words_[w].end <= m.begin || src_words_[w].begin >= m.end) continue;
    for (int32_t t : aligned_[w]) targets.push_back(static_cast<size_t>(t));
  }
  std::sort(targets.begin(), targets.end());
  targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
  size_t best = 0;
  for (size_t i = 0; i < targets.size();) {
    size_t j = i + 1;
    while (j < targets.size() && targets[j] - targets[j - 1] <= 2) ++j;
    if (j - i > best) {
      best = j - i;
      lo = targets[i];
      hi = targets[j - 1] + 1;
    }
    i = j;
  }
  return best > 0;
}

// A ranged element inside its parent's range, outside the siblings placed before it: the longest
// free stretch of its words. False (and zero width) when nothing is free.
bool MarkupProjection::longest_free_stretch(Placed& p, int32_t parent) {
  const size_t pa = parent >= 0 ? placed_[static_cast<size_t>(parent)].a : 0;
  const size_t pb = parent >= 0 ? placed_[static_cast<size_t>(parent)].b : n_target_;
  auto& siblings = children_[parent >= 0 ? static_cast<size_t>(parent) : n_];
  std::vector<char> free_word(pb > pa ? pb - pa : 0, 0);
  for (size_t t = std::max(p.a, pa); t < std::min(p.b, pb); ++t) free_word[t - pa] = 1;
  for (const auto& [sa, sb] : siblings)
    for (size_t t = std::max(sa, pa); t < std::min(sb, pb); ++t) free_word[t - pa] = 0;
  size_t best_a = 0, best_len = 0;
  for (size_t t = 0; t < free_word.size();) {
    if (!free_word[t]) {
      ++t;
      continue;
    }
    size_t u = t;
    while (u < free_word.size() && free_word[u]) ++u;
    if (u - t > best_len) {
      best_a = t;
      best_len = u - t;
    }
    t = u;
  }
  if (best_len == 0) return false;
  p.a = pa + best_a;
  p.b = p.a + best_len;
  siblings.emplace_back(p.a, p.b);
  return true;
}

// Every element, parents before children: on a range of target words, or zero width at a boundary
// inside its parent.
void MarkupProjection::place() {
  placed_.resize(n_);
  children_.resize(n_ + 1);
  for (size_t e = 0; e < n_; ++e) {
    const auto& m = block_.markup[e];
    const int32_t parent = m.parent;
    if (parent >= 0 && placed_[static_cast<size_t>(parent)].state != State::kRanged) {
      placed_[e].state = State::kInChunk;
      continue;
    }
    Placed p;
    size_t lo = 0, hi = 0;
    if (aligned_cluster(m, lo, hi)) {
      p.a = lo;
      p.b = hi;
      if (!longest_free_stretch(p, parent)) {
        p.state = State::kChunk;
        p.b = p.a;
      }
    } else {
      p.state = State::kChunk;
      p.a = p.b = boundary_at(m.begin);
    }
    if (p.state == State::kChunk) {
      const size_t pa = parent >= 0 ? placed_[static_cast<size_t>(parent)].a : 0;
      const size_t pb = parent >= 0 ? placed_[static_cast<size_t>(parent)].b : n_target_;
      p.a = p.b = std::clamp(p.a, pa, pb);
    }
    placed_[e] = p;
  }
}

// An element that began after a word's opening punctuation or ended before its closing
// punctuation in the source does so in the target too ("<a>Maus</a>." stays so).
void MarkupProjection::mark_punctuation() {
  after_lead_.assign(n_, 0);
  before_tail_.assign(n_, 0);
  for (size_t e = 0; e < n_; ++e) {
    const auto& m = block_.markup[e];
    if (placed_[e].state != State::kRanged) continue;
    for (const auto& w : src_words_) {
      const std::string_view word = std::string_view(block_.text).substr(w.begin, w.end - w.begin);
      if (w.begin < m.begin && m.begin < w.end && leading_punctuation(word) == m.begin - w.begin) after_lead_[e] = 1;
      if (w.begin < m.end && m.end < w.end && trailing_punctuation(word) == w.end - m.end) before_tail_[e] = 1;
    }
  }
}

// The tags due at each boundary; a chunk sits just inside its ranged parent when that opens or
// closes there.
void MarkupProjection::collect_boundaries() {
  at_.resize(n_target_ + 1);
  before_close_.resize(n_);
  after_open_.resize(n_);
  for (size_t e = 0; e < n_; ++e) {
    if (placed_[e].state == State::kRanged) {
      at_[placed_[e].a].opens.push_back(e);
      at_[placed_[e].b].closes.push_back(e);
    }
  }
  for (size_t e = 0; e < n_; ++e) {
    if (placed_[e].state != State::kChunk) continue;
    const int32_t parent = block_.markup[e].parent;
    const size_t k = placed_[e].a;
    if (parent >= 0 && placed_[static_cast<size_t>(parent)].b == k) {
      before_close_[static_cast<size_t>(parent)].push_back(e);
    } else if (parent >= 0 && placed_[static_cast<size_t>(parent)].a == k) {
      after_open_[static_cast<size_t>(parent)].push_back(e);
    } else {
      at_[k].middle.push_back(e);
    }
  }
}

// A zero-width element with everything inside it, as written, without its text.
std::string MarkupProjection::chunk(size_t e) const {
  const auto& markup = block_.markup;
  std::string out = markup[e].open;
  std::vector<size_t> stack{e};
  for (size_t d = e + 1; d < n_ && markup[d].parent >= static_cast<int32_t>(e); ++d) {
    while (static_cast<int32_t>(stack.back()) != markup[d].parent) {
      out += markup[stack.back()].close;
      stack.pop_back();
    }
    out += markup[d].open;
    stack.push_back(d);
  }
  for (auto it = stack.rbegin(); it != stack.rend(); ++it) out += markup[*it].close;
  return out;
}

// The closes at k: `inner` (before the closing punctuation of word k - 1: the innermost elements
// that ended so in the source) and `outer` (after it).
void MarkupProjection::closes_at(size_t k, std::string& inner, std::string& outer) const {
  if (n_ == 0) return;
  auto list = at_[k].closes;  // a chain: the innermost (latest start, then latest element) first
  std::sort(list.begin(), list.end(), [&](size_t x, size_t y) {
    return placed_[x].a != placed_[y].a ? placed_[x].a > placed_[y].a : x > y;
  });
  bool in = true;
  for (size_t e : list) {
    in = in && before_tail_[e];
    std::string& out = in ? inner : outer;
    for (size_t z : before_close_[e]) out += chunk(z);
    out += block_.markup[e].close;
  }
}

// The opens at k: `outer` (before the opening punctuation of word k) and `inner` (after it: the
// innermost elements that began so in the source).
void MarkupProjection::opens_at(size_t k, std::string& outer, std::string& inner) const {
  if (n_ == 0) return;
  for (size_t z : at_[k].middle) outer += chunk(z);
  auto list = at_[k].opens;  // a chain: the outermost (latest end, then earliest element) first
  std::sort(list.begin(), list.end(), [&](size_t x, size_t y) {
    return placed_[x].b != placed_[y].b ? placed_[x].b > placed_[y].b : x < y;
  });
  size_t split = list.size();
  while (split > 0 && after_lead_[list[split - 1]]) --split;
  for (size_t i = 0; i < list.size(); ++i) {
    std::string& out = i < split ? outer : inner;
    out += block_.markup[list[i]].open;
    for (size_t z : after_open_[list[i]]) out += chunk(z);
  }
}

std::string MarkupProjection::write() const {
  std::string out = block_.text.substr(0, block_.spans.front().begin);  // leading whitespace
  std::string outer, inner;
  auto opens = [&](size_t k) {
    outer.clear();
    inner.clear();
    opens_at(k, outer, inner);
  };
  if (n_target_ == 0) {
    opens(0);
    out += outer + inner;
  }
  size_t g = 0;  // target word over the block
  for (size_t j = 0; j < sentences(); ++j) {
    if (j > 0) out += block_.text.substr(block_.spans[j - 1].end, block_.spans[j].begin - block_.spans[j - 1].end);
    const std::string_view t = target(j).text;
    size_t pos = 0;
    for (const auto& w : tgt_words_[j]) {
      out += escape_(t.substr(pos, w.begin - pos));
      const std::string_view word = t.substr(w.begin, w.end - w.begin);
      const size_t lead = leading_punctuation(word), tail = std::min(trailing_punctuation(word), word.size() - lead);
      opens(g);
      out += outer + escape_(word.substr(0, lead)) + inner;
      out += escape_(word.substr(lead, word.size() - lead - tail));
      ++g;
      outer.clear();
      inner.clear();
      closes_at(g, inner, outer);
      out += inner + escape_(word.substr(word.size() - tail)) + outer;
      if (g == n_target_) {
        opens(g);
        out += outer + inner;
      }
      pos = w.end;
    }
    out += escape_(t.substr(pos));
  }
  out += block_.text.substr(block_.spans.back().end);  // trailing whitespace
  return out;
}

}  // namespace

std::string project_markup(const TextBlock& block, const std::vector<SentenceTranslation>& translations,
                           const std::function<std::string(std::string_view)>& escape) {
  return MarkupProjection(block, translations, escape).write();
}

}  // namespace torchmt
