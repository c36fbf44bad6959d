#include "html_lexer.h"

#include <charconv>
#include <unordered_map>
#include <unordered_set>

#include "torchmt/util/strings.h"

namespace torchmt::html {
namespace {

bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
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

// The tag at text[pos] == '<' followed by a letter or "/letter", and its length in bytes (0 when
// it never ends).
size_t read_tag(std::string_view text, size_t pos, Tag& tag) {
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
      return i + 1 - pos;
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
        if (close == std::string_view::npos) return 0;  // unterminated: the tag never ends
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
  return 0;  // no '>'
}

// The character reference at text[pos] == '&' and its length (0: none; the '&' is text).
size_t read_entity(std::string_view text, size_t pos, char32_t& code_point) {
  const size_t semi = text.find(';', pos + 1);
  if (semi == std::string_view::npos || semi - pos > 32) return 0;
  const std::string_view name = text.substr(pos + 1, semi - pos - 1);
  if (name.size() > 1 && name[0] == '#') {
    const bool hex = name[1] == 'x' || name[1] == 'X';
    const std::string_view digits = name.substr(hex ? 2 : 1);
    uint32_t value = 0;
    const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), value, hex ? 16 : 10);
    if (digits.empty() || r.ec != std::errc() || r.ptr != digits.data() + digits.size()) return 0;
    code_point = (value == 0 || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) ? 0xFFFD : value;
    return semi + 1 - pos;
  }
  const auto it = named_entities().find(name);
  if (it == named_entities().end()) return 0;
  code_point = it->second;
  return semi + 1 - pos;
}

}  // namespace

ElementKind classify(const std::string& name) {
  static const std::unordered_set<std::string> inline_names{
      "a",     "abbr", "b",   "bdi",  "bdo",    "big",  "cite", "data", "del",    "dfn", "em",  "font", "i",
      "ins",   "label", "mark", "q",  "s",      "small", "span", "strike", "strong", "sub", "sup", "time", "tt",
      "u"};
  if (inline_names.count(name)) return ElementKind::kInline;
  if (name == "img" || name == "wbr") return ElementKind::kVoidInline;
  if (name == "script" || name == "style" || name == "textarea") return ElementKind::kRawText;
  if (name == "code" || name == "pre" || name == "kbd" || name == "samp" || name == "svg" || name == "math")
    return ElementKind::kUntranslated;
  return ElementKind::kBlock;
}

bool is_void(const std::string& name) {
  static const std::unordered_set<std::string> names{"area", "base", "br",   "col",   "embed",  "hr",  "img",
                                                     "input", "link", "meta", "param", "source", "track", "wbr"};
  return names.count(name) > 0;
}

bool Lexer::next(Token& token) {
  if (pos_ >= text_.size()) return false;
  token = Token();
  token.begin = pos_;
  const std::string_view rest = text_.substr(pos_);
  size_t length = 0;
  if (rest.compare(0, 4, "<!--") == 0) {
    const size_t close = rest.find("-->", 4);
    token.kind = Token::Kind::kComment;
    length = close == std::string_view::npos ? rest.size() : close + 3;
  } else if (rest[0] == '<' && rest.size() > 1 && (rest[1] == '!' || rest[1] == '?')) {
    const size_t gt = rest.find('>');
    token.kind = Token::Kind::kDeclaration;
    length = gt == std::string_view::npos ? rest.size() : gt + 1;
  } else if (rest[0] == '<' && rest.size() > 1 &&
             (is_alpha(rest[1]) || (rest[1] == '/' && rest.size() > 2 && is_alpha(rest[2])))) {
    token.kind = Token::Kind::kTag;
    length = read_tag(text_, pos_, token.tag);
  } else if (rest[0] == '&') {
    token.kind = Token::Kind::kEntity;
    length = read_entity(text_, pos_, token.code_point);
  }
  if (length == 0) {  // text: up to the next byte that may start something else
    token = Token();
    token.begin = pos_;
    const size_t next = rest.find_first_of("<&", 1);
    length = next == std::string_view::npos ? rest.size() : next;
  }
  pos_ += length;
  token.end = pos_;
  return true;
}

size_t Lexer::skip_element(const Tag& start) {
  if (start.self_closing || is_void(start.name)) return pos_;
  if (lowered_.empty()) lowered_ = lower(text_);
  const std::string_view lowered = lowered_;
  const std::string& name = start.name;
  if (classify(name) == ElementKind::kRawText) {
    const size_t close = lowered.find("</" + name, pos_);
    const size_t gt = close == std::string_view::npos ? close : lowered.find('>', close);
    return pos_ = gt == std::string_view::npos ? lowered.size() : gt + 1;
  }
  int64_t depth = 1;
  for (size_t i = pos_; i < lowered.size();) {
    const size_t lt = lowered.find('<', i);
    if (lt == std::string_view::npos) break;
    const bool end = lt + 1 < lowered.size() && lowered[lt + 1] == '/';
    const size_t name_at = lt + (end ? 2 : 1);
    const bool same = lowered.compare(name_at, name.size(), name) == 0 &&
                      (name_at + name.size() == lowered.size() || !is_alpha(lowered[name_at + name.size()]));
    const size_t gt = lowered.find('>', lt);
    if (gt == std::string_view::npos) break;
    if (same) {
      const bool self_closing = lowered[gt - 1] == '/';
      depth += end ? -1 : self_closing ? 0 : 1;
      if (depth == 0) return pos_ = gt + 1;
    }
    i = gt + 1;
  }
  return pos_ = lowered.size();
}

}  // namespace torchmt::html
