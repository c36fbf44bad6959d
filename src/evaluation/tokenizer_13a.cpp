#include "evaluation/tokenizer_13a.h"

#include "evaluation/unicode_text.h"

namespace torchmt::evaluation {
namespace {

// Python's str.replace: non-overlapping occurrences, left to right.
std::u32string replace_all(std::u32string_view text, std::u32string_view from, std::u32string_view to) {
  std::u32string out;
  out.reserve(text.size());
  size_t pos = 0;
  for (size_t hit; (hit = text.find(from, pos)) != std::u32string_view::npos; pos = hit + from.size()) {
    out.append(text.substr(pos, hit - pos));
    out.append(to);
  }
  out.append(text.substr(pos));
  return out;
}

// Python's re character class [0-9] is ASCII only, unlike \d.
bool is_ascii_digit(char32_t c) { return c >= U'0' && c <= U'9'; }

bool is_period_or_comma(char32_t c) { return c == U'.' || c == U','; }

// The class [\{-\~\[-\` -\&\(-\+\:-\@\/] of the first regex: ASCII symbols that always become
// separate tokens (the space is in it too, which only adds whitespace).
bool is_always_split_symbol(char32_t c) {
  return (c >= 0x7B && c <= 0x7E) || (c >= 0x5B && c <= 0x60) || (c >= 0x20 && c <= 0x26) ||
         (c >= 0x28 && c <= 0x2B) || (c >= 0x3A && c <= 0x40) || c == 0x2F;
}

// re.sub with a two-character pattern `(A)(B)`: scans left to right, a match consumes both
// characters (so matches never overlap), and the replacement is built from the two.
template <typename First, typename Second, typename Emit>
std::u32string substitute_pairs(const std::u32string& text, First first, Second second, Emit emit) {
  std::u32string out;
  out.reserve(text.size() + text.size() / 4);
  size_t i = 0;
  while (i < text.size()) {
    if (i + 1 < text.size() && first(text[i]) && second(text[i + 1])) {
      emit(out, text[i], text[i + 1]);
      i += 2;
    } else {
      out.push_back(text[i]);
      ++i;
    }
  }
  return out;
}

}  // namespace

std::u32string tokenize_13a(std::u32string_view input) {
  // Language-independent part, in sacreBLEU's order.
  std::u32string line = replace_all(input, U"<skipped>", U"");
  line = replace_all(line, U"-\n", U"");
  line = replace_all(line, U"\n", U" ");
  if (line.find(U'&') != std::u32string::npos) {
    line = replace_all(line, U"&quot;", U"\"");
    line = replace_all(line, U"&amp;", U"&");
    line = replace_all(line, U"&lt;", U"<");
    line = replace_all(line, U"&gt;", U">");
  }

  // Language-dependent part on " line ", one regex after the other.
  std::u32string text;
  text.reserve(line.size() * 2 + 2);
  text.push_back(U' ');
  for (char32_t c : line) {
    if (is_always_split_symbol(c)) {
      text.push_back(U' ');
      text.push_back(c);
      text.push_back(U' ');
    } else {
      text.push_back(c);
    }
  }
  text.push_back(U' ');

  const auto not_digit = [](char32_t c) { return !is_ascii_digit(c); };
  // Period and comma unless preceded by a digit: ([^0-9])([\.,]) -> "\1 \2 ".
  text = substitute_pairs(text, not_digit, is_period_or_comma, [](std::u32string& out, char32_t a, char32_t b) {
    out.push_back(a), out.push_back(U' '), out.push_back(b), out.push_back(U' ');
  });
  // Period and comma unless followed by a digit: ([\.,])([^0-9]) -> " \1 \2".
  text = substitute_pairs(text, is_period_or_comma, not_digit, [](std::u32string& out, char32_t a, char32_t b) {
    out.push_back(U' '), out.push_back(a), out.push_back(U' '), out.push_back(b);
  });
  // Dash when preceded by a digit: ([0-9])(-) -> "\1 \2 ".
  text = substitute_pairs(text, is_ascii_digit, [](char32_t c) { return c == U'-'; },
                          [](std::u32string& out, char32_t a, char32_t b) {
                            out.push_back(a), out.push_back(U' '), out.push_back(b), out.push_back(U' ');
                          });

  // ' '.join(line.split())
  std::u32string tokenized;
  tokenized.reserve(text.size());
  for (const auto& token : split_on_whitespace(text)) {
    if (!tokenized.empty()) tokenized.push_back(U' ');
    tokenized.append(token);
  }
  return tokenized;
}

std::string tokenize_13a(std::string_view line) {
  return encode_utf8(tokenize_13a(std::u32string_view(decode_utf8_or_throw(line, "13a tokenizer input"))));
}

}  // namespace torchmt::evaluation
