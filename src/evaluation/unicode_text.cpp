#include "evaluation/unicode_text.h"

#include <stdexcept>

namespace torchmt::evaluation {

bool is_python_whitespace(char32_t c) {
  // The list `[c for c in range(0x110000) if chr(c).isspace()]` of CPython 3.
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  if (c < 0x85) return false;
  switch (c) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

std::vector<std::u32string> split_on_whitespace(std::u32string_view text) {
  std::vector<std::u32string> pieces;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_python_whitespace(text[i])) ++i;
    const size_t start = i;
    while (i < text.size() && !is_python_whitespace(text[i])) ++i;
    if (i > start) pieces.emplace_back(text.substr(start, i - start));
  }
  return pieces;
}

std::u32string_view strip_trailing_whitespace(std::u32string_view text) {
  size_t end = text.size();
  while (end > 0 && is_python_whitespace(text[end - 1])) --end;
  return text.substr(0, end);
}

}  // namespace torchmt::evaluation
