#pragma once
// UTF-8 decoding and the whitespace rules of Python's `str`, which sacreBLEU's metrics are
// defined by: its `split()` and `rstrip()` treat 29 code points as whitespace (NBSP, U+2009,
// U+3000, ... besides ASCII), so scoring must decode the text rather than look at bytes.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace torchmt::evaluation {

// Code points of `utf8`, or nullopt when it is not valid UTF-8 by the rules of Python's strict
// decoder (no overlong forms, no surrogates, nothing above U+10FFFF).
std::optional<std::u32string> decode_utf8(std::string_view utf8);

// As `decode_utf8`, but throws std::invalid_argument naming `what` on invalid input.
std::u32string decode_utf8_or_throw(std::string_view utf8, std::string_view what);

std::string encode_utf8(std::u32string_view code_points);

// The byte offset of the first invalid UTF-8 sequence, or nullopt when `utf8` is valid.
std::optional<size_t> find_invalid_utf8(std::string_view utf8);

// True for exactly the code points for which Python's str.isspace() is true.
bool is_python_whitespace(char32_t c);

// Python's `text.split()`: runs of whitespace separate, no empty pieces.
std::vector<std::u32string> split_on_whitespace(std::u32string_view text);

// Python's `text.rstrip()`.
std::u32string_view strip_trailing_whitespace(std::u32string_view text);

}  // namespace torchmt::evaluation
