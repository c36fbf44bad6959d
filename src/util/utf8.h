#pragma once
// The one UTF-8 validator and codec of torchmt, by the rules of Python's strict decoder (no
// overlong forms, no surrogates, nothing above U+10FFFF): corpus reading, translate input and
// sacreBLEU-exact scoring must agree on what valid text is.
#include <optional>
#include <string>
#include <string_view>

namespace torchmt {

// The byte offset of the first invalid UTF-8 sequence, or nullopt when `utf8` is valid.
std::optional<size_t> find_invalid_utf8(std::string_view utf8);
inline bool is_valid_utf8(std::string_view utf8) { return !find_invalid_utf8(utf8).has_value(); }

// Code points of `utf8`, or nullopt when it is not valid UTF-8.
std::optional<std::u32string> decode_utf8(std::string_view utf8);
// As `decode_utf8`, but throws std::invalid_argument naming `what` on invalid input.
std::u32string decode_utf8_or_throw(std::string_view utf8, std::string_view what);

std::string encode_utf8(std::u32string_view code_points);

// Lenient stepping for text scanners (sentence splitting, HTML): the code point starting at
// s[i] / ending at s[end - 1] and its length in bytes; a byte that does not start (end) a whole
// sequence is itself, of length 1.
char32_t code_point_at(std::string_view s, size_t i, size_t* length);
char32_t code_point_before(std::string_view s, size_t end, size_t* length);

// `utf8` with every maximal invalid subsequence replaced by U+FFFD (what Python's
// decode(errors="replace") does); `replaced` counts the replacements when given.
std::string replace_invalid_utf8(std::string_view utf8, size_t* replaced = nullptr);

}  // namespace torchmt
