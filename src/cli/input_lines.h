#pragma once
// Input lines for `translate` and `evaluate`: a file (plain or .gz) or standard input.
#include <string>
#include <vector>

namespace torchmt::cli {

// Lines of a file (plain or .gz), or of stdin for "-". Invalid UTF-8: with `strict`, an error
// naming the source, the line and the byte; otherwise the bad bytes become U+FFFD and a warning
// naming the line goes to stderr (one bad line must not cost the others their translation).
std::vector<std::string> read_input_lines(const std::string& path, bool strict);

}  // namespace torchmt::cli
