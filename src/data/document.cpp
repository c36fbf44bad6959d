#include "torchmt/data/document.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <stdexcept>
#include <unordered_set>

#include "torchmt/util/strings.h"
#include "torchmt/util/utf8.h"

namespace torchmt {
namespace {

bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

bool blank(std::string_view s) { return std::all_of(s.begin(), s.end(), is_ascii_space); }

// Elements that stay inside a sentence; every other tag ends a block.
bool is_inline(const std::string& name) {
  static const std::unordered_set<std::string> names{
      "a",     "abbr", "b",   "bdi",  "bdo",    "big",  "cite", "data", "del",    "dfn", "em",  "font", "i",
      "ins",   "label", "mark", "q",  "s",      "small", "span", "strike", "strong", "sub", "sup", "time", "tt",
      "u"};
  return names.count(name) > 0;
}
bool is_void_inline(const std::string& name) { return name == "img" || name == "wbr"; }
// Content kept byte for byte: raw text up to the end tag, or markup not to be translated.
bool is_raw_text(const std::string& name) { return name == "script" || name == "style" || name == "textarea"; }
bool is_untranslated(const std::string& name) {
  return name == "code" || name == "pre" || name == "kbd" || name == "samp" || name == "svg" || name == "math";
}
bool is_void(const std::string& name) {
  static const std::unordered_set<std::string> names{"area", "base", "br",   "col",   "embed",  "hr",  "img",
                                                     "input", "link", "meta", "param", "source", "track", "wbr"};
  return names.count(name) > 0;
}

const std::unordered_map<std::string_view, char32_t>& named_entities() {
  static const std::unordered_map<std::string_view, char32_t> table{
      {"amp", '&'},       {"lt", '<'},        {"gt", '>'},        {"quot", '"'},      {"apos", '\''},
      {"nbsp", 0xA0},     {"copy", 0xA9},     {"reg", 0xAE},      {"trade", 0x2122},  {"hellip", 0x2026},
      {"mdash", 0x2014},  {"ndash", 0x2013},  {"lsquo", 0x2018},  {"rsquo", 0x2019},  {"sbquo", 0x201A},
      {"ldquo", 0x201C},  {"rdquo", 0x201D},  {"bdquo", 0x201E},  {"laquo", 0xAB},    {"raquo", 0xBB},
      {"euro", 0x20AC},   {"pound", 0xA3},    {"yen", 0xA5},      {"cent", 0xA2},     {"sect", 0xA7},
      {"para", 0xB6},     {"deg", 0xB0},      {"plusmn", 0xB1},   {"times", 0xD7},    {"divide", 0xF7},
      {"middot", 0xB7},   {"bull", 0x2022},   {"auml", 0xE4},     {"ouml", 0xF6},     {"uuml", 0xFC},
      {"Auml", 0xC4},     {"Ouml", 0xD6},     {"Uuml", 0xDC},     {"szlig", 0xDF},    {"aacute", 0xE1},
      {"eacute", 0xE9},   {"iacute", 0xED},   {"oacute", 0xF3},   {"uacute", 0xFA},   {"agrave", 0xE0},
      {"egrave", 0xE8},   {"acirc", 0xE2},    {"ecirc", 0xEA},    {"ocirc", 0xF4},    {"ccedil", 0xE7},
      {"ntilde", 0xF1},   {"Eacute", 0xC9},   {"shy", 0xAD},      {"ensp", 0x2002},   {"emsp", 0x2003},
      {"thinsp", 0x2009}};
  return table;
}

// A tag as written: its lower-case name, whether it is an end tag or closes itself, the
// attributes that decide whether its content is translated, and its length in bytes.
struct Tag {
  std::string name;
  bool end = false, self_closing = false, untranslated = false;
  size_t length = 0;
};

// The tag at text[pos] == '<' followed by a letter or "/letter"; length 0 when it never ends.
Tag read_tag(std::string_view text, size_t pos) {
  Tag tag;
  size_t i = pos + 1;
  if (text[i] == '/') {
    tag.end = true;
    ++i;
  }
  const size_t name_begin = i;
  while (i < text.size() && !is_ascii_space(text[i]) && text[i] != '/' && text[i] != '>') ++i;
  tag.name = lower(text.substr(name_begin, i - name_begin));
  while (i < text.size()) {
    while (i < text.size() && (is_ascii_space(text[i]) || text[i] == '/')) ++i;
    if (i >= text.size()) break;
    if (text[i] == '>') {
      tag.self_closing = !tag.end && text[i - 1] == '/';
      tag.length = i + 1 - pos;
      return tag;
    }
    const size_t attr_begin = i;
    while (i < text.size() && !is_ascii_space(text[i]) && text[i] != '/' && text[i] != '>' && text[i] != '=') ++i;
    const std::string attr = lower(text.substr(attr_begin, i - attr_begin));
    if (i == attr_begin) ++i;  // a stray '=': skip it
    while (i < text.size() && is_ascii_space(text[i])) ++i;
    std::string_view value;
    if (i < text.size() && text[i] == '=') {
      ++i;
      while (i < text.size() && is_ascii_space(text[i])) ++i;
      if (i < text.size() && (text[i] == '"' || text[i] == '\'')) {
        const char quote = text[i];
        const size_t close = text.find(quote, i + 1);
        if (close == std::string_view::npos) return tag;  // unterminated: the tag never ends
        value = text.substr(i + 1, close - i - 1);
        i = close + 1;
      } else {
        const size_t begin = i;
        while (i < text.size() && !is_ascii_space(text[i]) && text[i] != '>') ++i;
        value = text.substr(begin, i - begin);
      }
    }
    if (attr == "translate" && lower(value) == "no") tag.untranslated = true;
    if (attr == "class") {
      for (const auto& w : whitespace_words(value))
        if (value.substr(w.begin, w.end - w.begin) == "notranslate") tag.untranslated = true;
    }
  }
  return tag;  // no '>': length 0
}

// The end of the element whose start tag ends at `pos`: after its matching end tag (raw-text
// elements: the first "</name"), or the end of the text.
// `lowered`: the whole text in lower case.
size_t element_end(std::string_view lowered, size_t pos, const std::string& name, bool raw) {
  if (raw) {
    const size_t close = lowered.find("</" + name, pos);
    if (close == std::string::npos) return lowered.size();
    const size_t gt = lowered.find('>', close);
    return gt == std::string::npos ? lowered.size() : gt + 1;
  }
  int64_t depth = 1;
  for (size_t i = pos; i < lowered.size();) {
    const size_t lt = lowered.find('<', i);
    if (lt == std::string::npos) break;
    const bool end = lt + 1 < lowered.size() && lowered[lt + 1] == '/';
    const size_t name_at = lt + (end ? 2 : 1);
    const bool same = lowered.compare(name_at, name.size(), name) == 0 &&
                      (name_at + name.size() == lowered.size() || !is_alpha(lowered[name_at + name.size()]));
    const size_t gt = lowered.find('>', lt);
    if (gt == std::string::npos) break;
    if (same) {
      const bool self_closing = lowered[gt - 1] == '/';
      depth += end ? -1 : self_closing ? 0 : 1;
      if (depth == 0) return gt + 1;
    }
    i = gt + 1;
  }
  return lowered.size();
}

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

}  // namespace

DocumentFormat parse_document_format(const std::string& name) {
  if (name == "text") return DocumentFormat::kText;
  if (name == "html") return DocumentFormat::kHtml;
  throw std::invalid_argument("format '" + name + "' is not supported (text or html)");
}

Document::Document(std::string_view text, DocumentFormat format, const SentenceSplitter* splitter) {
  if (format == DocumentFormat::kHtml) {
    parse_html(text, splitter);
    return;
  }
  for (size_t begin = 0; begin <= text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(begin, end - begin);
    if (blank(line)) {
      parts_.push_back({std::string(line)});
    } else {
      Block block;
      block.text = std::string(line);
      add_block(std::move(block), splitter);
    }
    if (end < text.size()) parts_.push_back({"\n"});
    begin = end + 1;
  }
}

void Document::add_block(Block block, const SentenceSplitter* splitter) {
  if (splitter) {
    block.spans = splitter->split(block.text);
  } else {
    const auto words = whitespace_words(block.text);
    block.spans.push_back({words.front().begin, words.back().end});
  }
  block.first_sentence = sentences_.size();
  for (const auto& span : block.spans) {
    std::string sentence = block.text.substr(span.begin, span.end - span.begin);
    if (block.html) {  // HTML whitespace (newlines, indentation) is one space
      std::string collapsed;
      for (const auto& w : whitespace_words(sentence)) {
        if (!collapsed.empty()) collapsed += ' ';
        collapsed.append(sentence, w.begin, w.end - w.begin);
      }
      sentence = std::move(collapsed);
    }
    sentences_.push_back(std::move(sentence));
  }
  for (const auto& m : block.markup) needs_alignments_ = needs_alignments_ || m.paired || m.begin > 0;
  parts_.push_back({std::string(), static_cast<int64_t>(blocks_.size())});
  blocks_.push_back(std::move(block));
}

void Document::parse_html(std::string_view text, const SentenceSplitter* splitter) {
  Block block;
  block.html = true;
  size_t raw_begin = 0;          // where the current block starts in `text`
  std::vector<int32_t> open;     // its open inline elements, innermost last
  std::vector<std::string> open_names;
  std::string lowered;           // the text in lower case, made when first needed
  auto zero_width = [&](std::string raw) {
    Document::Markup m;
    m.open = std::move(raw);
    m.begin = m.end = block.text.size();
    m.parent = open.empty() ? -1 : open.back();
    block.markup.push_back(std::move(m));
  };
  // Ends the block before text[pos]: translated when it has words, else copied as written.
  auto flush = [&](size_t pos) {
    for (int32_t e : open) {  // never closed here: kept in place as zero-width items
      block.markup[static_cast<size_t>(e)].paired = false;
      block.markup[static_cast<size_t>(e)].end = block.markup[static_cast<size_t>(e)].begin;
    }
    open.clear();
    open_names.clear();
    if (blank(block.text)) {
      if (pos > raw_begin) parts_.push_back({std::string(text.substr(raw_begin, pos - raw_begin))});
    } else {
      add_block(std::move(block), splitter);
    }
    block = Block();
    block.html = true;
  };
  auto literal = [&](size_t begin, size_t end) {
    flush(begin);
    parts_.push_back({std::string(text.substr(begin, end - begin))});
    raw_begin = end;
  };
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '<' && text.compare(i, 4, "<!--") == 0) {
      const size_t close = text.find("-->", i + 4);
      const size_t end = close == std::string_view::npos ? text.size() : close + 3;
      zero_width(std::string(text.substr(i, end - i)));
      i = end;
      continue;
    }
    if (c == '<' && i + 1 < text.size() && (text[i + 1] == '!' || text[i + 1] == '?')) {
      const size_t gt = text.find('>', i);
      const size_t end = gt == std::string_view::npos ? text.size() : gt + 1;
      literal(i, end);
      i = end;
      continue;
    }
    const bool tag_start = c == '<' && i + 1 < text.size() &&
                           (is_alpha(text[i + 1]) || (text[i + 1] == '/' && i + 2 < text.size() && is_alpha(text[i + 2])));
    if (tag_start) {
      const Tag tag = read_tag(text, i);
      if (tag.length > 0) {
        const size_t end = i + tag.length;
        const std::string raw(text.substr(i, tag.length));
        if (!tag.end && (is_raw_text(tag.name) || is_untranslated(tag.name) || tag.untranslated)) {
          if (lowered.empty()) lowered = lower(text);
          const size_t element = tag.self_closing || is_void(tag.name)
                                     ? end
                                     : element_end(lowered, end, tag.name, is_raw_text(tag.name));
          literal(i, element);
          i = element;
        } else if (is_inline(tag.name) && tag.end) {
          const auto match = std::find(open_names.rbegin(), open_names.rend(), tag.name);
          if (match == open_names.rend()) {
            zero_width(raw);  // a stray end tag stays where it was
          } else {
            for (auto left = match - open_names.rbegin(); left > 0; --left) {  // left open inside it: zero-width
              auto& m = block.markup[static_cast<size_t>(open.back())];
              m.paired = false;
              m.end = m.begin;
              open.pop_back();
              open_names.pop_back();
            }
            auto& m = block.markup[static_cast<size_t>(open.back())];
            m.close = raw;
            m.end = block.text.size();
            open.pop_back();
            open_names.pop_back();
          }
          i = end;
        } else if (is_inline(tag.name) && !tag.self_closing) {
          Document::Markup m;
          m.open = raw;
          m.begin = m.end = block.text.size();
          m.parent = open.empty() ? -1 : open.back();
          m.paired = true;
          open.push_back(static_cast<int32_t>(block.markup.size()));
          open_names.push_back(tag.name);
          block.markup.push_back(std::move(m));
          i = end;
        } else if (is_inline(tag.name) || is_void_inline(tag.name)) {
          zero_width(raw);
          i = end;
        } else {
          literal(i, end);  // block-level (and unknown) tags end the block
          i = end;
        }
        continue;
      }
    }
    if (c == '&') {
      const size_t semi = text.find(';', i + 1);
      if (semi != std::string_view::npos && semi - i <= 32) {
        const std::string_view name = text.substr(i + 1, semi - i - 1);
        char32_t cp = 0;
        bool known = false;
        if (name.size() > 1 && name[0] == '#') {
          const bool hex = name[1] == 'x' || name[1] == 'X';
          const std::string_view digits = name.substr(hex ? 2 : 1);
          uint32_t value = 0;
          const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), value, hex ? 16 : 10);
          if (!digits.empty() && r.ec == std::errc() && r.ptr == digits.data() + digits.size()) {
            known = true;
            cp = (value == 0 || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) ? 0xFFFD : value;
          }
        } else if (const auto it = named_entities().find(name); it != named_entities().end()) {
          known = true;
          cp = it->second;
        }
        if (known) {
          if (cp == 0xFFFD) {
            block.text += encode_utf8(std::u32string(1, cp));  // not a character: not spelled back
          } else if (cp == 0xA0) {
            block.text += ' ';  // a word separator to the model (its normalisation makes it a space)
          } else {
            const std::string decoded = encode_utf8(std::u32string(1, cp));
            spelled_.emplace(decoded, std::string(text.substr(i, semi + 1 - i)));
            block.text += decoded;
          }
          i = semi + 1;
          continue;
        }
      }
    }
    block.text += c;
    ++i;
  }
  flush(text.size());
}

std::string Document::escape(std::string_view text) const {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    size_t n = 1;
    const auto b = static_cast<unsigned char>(text[i]);
    if (b >= 0xC0) n = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
    n = std::min(n, text.size() - i);
    const std::string ch(text.substr(i, n));
    if (const auto it = spelled_.find(ch); it != spelled_.end()) {
      out += it->second;
    } else if (ch == "&") {
      out += "&amp;";
    } else if (ch == "<") {
      out += "&lt;";
    } else if (ch == ">") {
      out += "&gt;";
    } else {
      out += ch;
    }
    i += n;
  }
  return out;
}

std::string Document::assemble(const std::vector<SentenceTranslation>& translations) const {
  if (translations.size() != sentences_.size())
    throw std::invalid_argument("document: " + std::to_string(translations.size()) + " translations for " +
                                std::to_string(sentences_.size()) + " sentences");
  std::string out;
  for (const auto& part : parts_)
    out += part.block < 0 ? part.literal : assemble_block(blocks_[static_cast<size_t>(part.block)], translations);
  return out;
}

std::string Document::assemble_block(const Block& block, const std::vector<SentenceTranslation>& translations) const {
  const size_t n_sentences = block.spans.size();
  auto target = [&](size_t j) -> const SentenceTranslation& { return translations[block.first_sentence + j]; };
  auto text_escape = [&](std::string_view s) { return block.html ? escape(s) : std::string(s); };
  // Source words of the block (global index), target words of each translation, and the pairs.
  std::vector<TextSpan> src_words;
  std::vector<size_t> src_sentence, src_offset(n_sentences + 1), tgt_offset(n_sentences + 1);
  std::vector<std::vector<TextSpan>> tgt_words(n_sentences);
  for (size_t j = 0; j < n_sentences; ++j) {
    src_offset[j] = src_words.size();
    const auto& span = block.spans[j];
    for (auto w : whitespace_words(std::string_view(block.text).substr(span.begin, span.end - span.begin))) {
      src_words.push_back({w.begin + span.begin, w.end + span.begin});
      src_sentence.push_back(j);
    }
    tgt_words[j] = whitespace_words(target(j).text);
    tgt_offset[j + 1] = tgt_offset[j] + tgt_words[j].size();
  }
  src_offset[n_sentences] = src_words.size();
  const size_t n_target = tgt_offset[n_sentences];
  std::vector<std::vector<int32_t>> aligned(src_words.size());  // source word -> target words (global)
  if (!block.markup.empty()) {
    for (size_t j = 0; j < n_sentences; ++j) {
      const size_t n_src = src_offset[j + 1] - src_offset[j];
      for (const auto& [s, t] : target(j).alignment) {
        if (s < 0 || t < 0 || static_cast<size_t>(s) >= n_src || static_cast<size_t>(t) >= tgt_words[j].size()) continue;
        aligned[src_offset[j] + static_cast<size_t>(s)].push_back(static_cast<int32_t>(tgt_offset[j] + static_cast<size_t>(t)));
      }
    }
  }
  // The target boundary for something before block text offset `pos`: before the first target
  // word aligned to the source word there or to a later one of its sentence; else the end of
  // that sentence's translation (of the block's, after the last word).
  auto boundary_at = [&](size_t pos) -> size_t {
    size_t w = 0;
    while (w < src_words.size() && src_words[w].end <= pos) ++w;
    if (w == src_words.size()) return n_target;
    const size_t j = src_sentence[w];
    for (; w < src_offset[j + 1]; ++w)
      if (!aligned[w].empty()) return static_cast<size_t>(*std::min_element(aligned[w].begin(), aligned[w].end()));
    return tgt_offset[j + 1];
  };

  // Placement, parents before children: a range [a, b) of target words, or zero width at a.
  enum class State { kRanged, kChunk, kInChunk };
  struct Placed {
    State state = State::kRanged;
    size_t a = 0, b = 0;
  };
  const size_t n = block.markup.size();
  std::vector<Placed> placed(n);
  std::vector<std::vector<std::pair<size_t, size_t>>> children(n + 1);  // ranged children's ranges; n = the root
  for (size_t e = 0; e < n; ++e) {
    const auto& m = block.markup[e];
    const int32_t parent = m.parent;
    if (parent >= 0 && placed[static_cast<size_t>(parent)].state != State::kRanged) {
      placed[e].state = State::kInChunk;  // inside a zero-width element: written with it
      continue;
    }
    Placed p;
    size_t lo = n_target + 1, hi = 0;
    if (m.paired && m.begin < m.end) {
      std::vector<size_t> targets;  // the target words aligned to its words
      for (size_t w = 0; w < src_words.size(); ++w) {
        if (src_words[w].end <= m.begin || src_words[w].begin >= m.end) continue;
        for (int32_t t : aligned[w]) targets.push_back(static_cast<size_t>(t));
      }
      std::sort(targets.begin(), targets.end());
      targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
      // The largest cluster (gaps of at most one word): a stray link far away does not stretch
      // the element over the words between.
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
    }
    if (lo < hi) {
      p.a = lo;
      p.b = hi;
    } else {
      p.state = State::kChunk;
      p.a = p.b = boundary_at(m.begin);
    }
    size_t pa = 0, pb = n_target;
    if (parent >= 0) {
      pa = placed[static_cast<size_t>(parent)].a;
      pb = placed[static_cast<size_t>(parent)].b;
    }
    if (p.state == State::kRanged) {
      // Inside the parent, outside the siblings placed before: the longest free stretch.
      std::vector<char> free_word(pb > pa ? pb - pa : 0, 0);
      for (size_t t = std::max(p.a, pa); t < std::min(p.b, pb); ++t) free_word[t - pa] = 1;
      for (const auto& [sa, sb] : children[parent >= 0 ? static_cast<size_t>(parent) : n])
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
      if (best_len > 0) {
        p.a = pa + best_a;
        p.b = p.a + best_len;
        children[parent >= 0 ? static_cast<size_t>(parent) : n].emplace_back(p.a, p.b);
      } else {
        p.state = State::kChunk;
        p.b = p.a;
      }
    }
    if (p.state == State::kChunk) p.a = p.b = std::clamp(p.a, pa, pb);
    placed[e] = p;
  }

  // An element that began after a word's opening punctuation or ended before its closing
  // punctuation in the source does so in the target too ("<a>Maus</a>." stays so).
  std::vector<char> after_lead(n, 0), before_tail(n, 0);
  for (size_t e = 0; e < n; ++e) {
    const auto& m = block.markup[e];
    if (placed[e].state != State::kRanged) continue;
    for (const auto& w : src_words) {
      const std::string_view word = std::string_view(block.text).substr(w.begin, w.end - w.begin);
      if (w.begin < m.begin && m.begin < w.end && leading_punctuation(word) == m.begin - w.begin) after_lead[e] = 1;
      if (w.begin < m.end && m.end < w.end && trailing_punctuation(word) == w.end - m.end) before_tail[e] = 1;
    }
  }

  // What goes at each boundary k: closes right after word k - 1, then zero-width chunks, then
  // opens right before word k (a chunk sits just inside its ranged parent when that opens or
  // closes there).
  struct Boundary {
    std::vector<size_t> closes, opens, middle;
  };
  std::vector<Boundary> at(n_target + 1);
  std::vector<std::vector<size_t>> before_close(n), after_open(n);
  for (size_t e = 0; e < n; ++e) {
    if (placed[e].state == State::kRanged) {
      at[placed[e].a].opens.push_back(e);
      at[placed[e].b].closes.push_back(e);
    }
  }
  for (size_t e = 0; e < n; ++e) {
    if (placed[e].state != State::kChunk) continue;
    const int32_t parent = block.markup[e].parent;
    const size_t k = placed[e].a;
    if (parent >= 0 && placed[static_cast<size_t>(parent)].b == k) {
      before_close[static_cast<size_t>(parent)].push_back(e);
    } else if (parent >= 0 && placed[static_cast<size_t>(parent)].a == k) {
      after_open[static_cast<size_t>(parent)].push_back(e);
    } else {
      at[k].middle.push_back(e);
    }
  }
  // A zero-width element with everything inside it, as written, without its text.
  auto chunk = [&](size_t e) {
    std::string out = block.markup[e].open;
    std::vector<size_t> stack{e};
    for (size_t d = e + 1; d < n && block.markup[d].parent >= static_cast<int32_t>(e); ++d) {
      while (static_cast<int32_t>(stack.back()) != block.markup[d].parent) {
        out += block.markup[stack.back()].close;
        stack.pop_back();
      }
      out += block.markup[d].open;
      stack.push_back(d);
    }
    for (auto it = stack.rbegin(); it != stack.rend(); ++it) out += block.markup[*it].close;
    return out;
  };
  // The closes at k: `inner` (before the closing punctuation of word k - 1: the innermost
  // elements that ended so in the source) and `outer` (after it).
  auto closes_at = [&](size_t k, std::string& inner, std::string& outer) {
    auto list = at[k].closes;  // a chain: the innermost (latest start, then latest element) first
    std::sort(list.begin(), list.end(), [&](size_t x, size_t y) {
      return placed[x].a != placed[y].a ? placed[x].a > placed[y].a : x > y;
    });
    bool in = true;
    for (size_t e : list) {
      in = in && before_tail[e];
      std::string& out = in ? inner : outer;
      for (size_t z : before_close[e]) out += chunk(z);
      out += block.markup[e].close;
    }
  };
  // The opens at k: `outer` (before the opening punctuation of word k) and `inner` (after it:
  // the innermost elements that began so in the source).
  auto opens_at = [&](size_t k, std::string& outer, std::string& inner) {
    for (size_t z : at[k].middle) outer += chunk(z);
    auto list = at[k].opens;  // a chain: the outermost (latest end, then earliest element) first
    std::sort(list.begin(), list.end(), [&](size_t x, size_t y) {
      return placed[x].b != placed[y].b ? placed[x].b > placed[y].b : x < y;
    });
    size_t split = list.size();
    while (split > 0 && after_lead[list[split - 1]]) --split;
    for (size_t i = 0; i < list.size(); ++i) {
      std::string& out = i < split ? outer : inner;
      out += block.markup[list[i]].open;
      for (size_t z : after_open[list[i]]) out += chunk(z);
    }
  };

  std::string out = block.text.substr(0, block.spans.front().begin);  // leading whitespace
  std::string outer, inner;
  if (n_target == 0) {
    opens_at(0, outer, inner);
    out += outer + inner;
  }
  size_t g = 0;  // global target word
  for (size_t j = 0; j < n_sentences; ++j) {
    if (j > 0) out += block.text.substr(block.spans[j - 1].end, block.spans[j].begin - block.spans[j - 1].end);
    const std::string_view t = target(j).text;
    size_t pos = 0;
    for (const auto& w : tgt_words[j]) {
      out += text_escape(t.substr(pos, w.begin - pos));
      const std::string_view word = t.substr(w.begin, w.end - w.begin);
      const size_t lead = leading_punctuation(word), tail = std::min(trailing_punctuation(word), word.size() - lead);
      outer.clear();
      inner.clear();
      opens_at(g, outer, inner);
      out += outer + text_escape(word.substr(0, lead)) + inner;
      out += text_escape(word.substr(lead, word.size() - lead - tail));
      ++g;
      outer.clear();
      inner.clear();
      closes_at(g, inner, outer);
      out += inner + text_escape(word.substr(word.size() - tail)) + outer;
      if (g == n_target) {
        outer.clear();
        inner.clear();
        opens_at(g, outer, inner);
        out += outer + inner;
      }
      pos = w.end;
    }
    out += text_escape(t.substr(pos));
  }
  out += block.text.substr(block.spans.back().end);  // trailing whitespace
  return out;
}

WordAlignment concatenate_alignments(const std::vector<std::string>& sources,
                                     const std::vector<SentenceTranslation>& translations) {
  WordAlignment out;
  int32_t src = 0, tgt = 0;
  for (size_t j = 0; j < sources.size() && j < translations.size(); ++j) {
    for (const auto& [s, t] : translations[j].alignment) out.emplace_back(s + src, t + tgt);
    src += static_cast<int32_t>(whitespace_words(sources[j]).size());
    tgt += static_cast<int32_t>(whitespace_words(translations[j].text).size());
  }
  return out;
}

}  // namespace torchmt
