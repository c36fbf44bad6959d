#include "util/utf8.h"

#include <stdexcept>

namespace torchmt {
namespace {

// Decodes one code point starting at `pos`; returns false on an invalid sequence.
bool decode_one(std::string_view s, size_t& pos, char32_t& out) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(pos);
  size_t length = 0;
  char32_t minimum = 0;
  if (lead < 0x80) {
    out = lead;
    ++pos;
    return true;
  } else if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2, minimum = 0x80, out = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3, minimum = 0x800, out = lead & 0x0F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4, minimum = 0x10000, out = lead & 0x07;
  } else {
    return false;  // continuation byte as lead, or 0xC0/0xC1/0xF5.. which only start overlong/out-of-range forms
  }
  if (pos + length > s.size()) return false;
  for (size_t i = 1; i < length; ++i) {
    const unsigned char b = byte(pos + i);
    if ((b & 0xC0) != 0x80) return false;
    out = (out << 6) | (b & 0x3F);
  }
  if (out < minimum || out > 0x10FFFF || (out >= 0xD800 && out <= 0xDFFF)) return false;
  pos += length;
  return true;
}

// Bytes of the maximal subpart of an ill-formed sequence starting at `pos` (Unicode §3.9 /
// W3C: the longest prefix of a well-formed sequence, at least one byte), once decode_one failed.
size_t invalid_length(std::string_view s, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(pos);
  size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;  // allowed range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 1;
  }
  size_t n = 1;
  if (pos + n < s.size() && byte(pos + n) >= low && byte(pos + n) <= high) {
    ++n;
    while (n < length && pos + n < s.size() && (byte(pos + n) & 0xC0) == 0x80) ++n;
  }
  return n;
}

}  // namespace

std::string replace_invalid_utf8(std::string_view utf8, size_t* replaced) {
  std::string out;
  out.reserve(utf8.size());
  size_t pos = 0, count = 0;
  while (pos < utf8.size()) {
    const size_t start = pos;
    char32_t c;
    if (decode_one(utf8, pos, c)) {
      out.append(utf8.substr(start, pos - start));
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD
      pos = start + invalid_length(utf8, start);
      ++count;
    }
  }
  if (replaced) *replaced = count;
  return out;
}

std::optional<std::u32string> decode_utf8(std::string_view utf8) {
  std::u32string out;
  out.reserve(utf8.size());
  size_t pos = 0;
  while (pos < utf8.size()) {
    char32_t c;
    if (!decode_one(utf8, pos, c)) return std::nullopt;
    out.push_back(c);
  }
  return out;
}

std::u32string decode_utf8_or_throw(std::string_view utf8, std::string_view what) {
  auto decoded = decode_utf8(utf8);
  if (!decoded) throw std::invalid_argument(std::string(what) + " is not valid UTF-8");
  return std::move(*decoded);
}

std::optional<size_t> find_invalid_utf8(std::string_view utf8) {
  size_t pos = 0;
  while (pos < utf8.size()) {
    const size_t start = pos;
    char32_t c;
    if (!decode_one(utf8, pos, c)) return start;
  }
  return std::nullopt;
}

std::string encode_utf8(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t c : code_points) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (c >> 12)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (c >> 18)));
      out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  return out;
}

char32_t code_point_at(std::string_view s, size_t i, size_t* length) {
  const auto b = static_cast<unsigned char>(s[i]);
  const size_t n = b < 0xC0 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
  if (n == 1 || i + n > s.size()) {
    *length = 1;
    return b;
  }
  char32_t c = b & (0xFF >> (n + 1));
  for (size_t k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  *length = n;
  return c;
}

char32_t code_point_before(std::string_view s, size_t end, size_t* length) {
  size_t begin = end - 1;
  while (begin > 0 && end - begin < 4 && (static_cast<unsigned char>(s[begin]) & 0xC0) == 0x80) --begin;
  size_t n = 0;
  const char32_t c = code_point_at(s, begin, &n);
  if (begin + n != end) {  // not one whole sequence: the last byte alone
    *length = 1;
    return static_cast<unsigned char>(s[end - 1]);
  }
  *length = n;
  return c;
}

}  // namespace torchmt
