#pragma once
// The whitespace rules of Python's `str`, which sacreBLEU's metrics are
// defined by: its `split()` and `rstrip()` treat 29 code points as whitespace (NBSP, U+2009,
// U+3000, ... besides ASCII), so scoring must decode the text rather than look at bytes.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/utf8.h"  // decode_utf8 / encode_utf8 / find_invalid_utf8

namespace torchmt::evaluation {

// True for exactly the code points for which Python's str.isspace() is true.
bool is_python_whitespace(char32_t c);

// Python's `text.split()`: runs of whitespace separate, no empty pieces.
std::vector<std::u32string> split_on_whitespace(std::u32string_view text);

// Python's `text.rstrip()`.
std::u32string_view strip_trailing_whitespace(std::u32string_view text);

}  // namespace torchmt::evaluation
