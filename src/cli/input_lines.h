#pragma once
// Input lines for `translate` and `evaluate`: a file (plain or .gz) or standard input.
#include <string>
#include <vector>

namespace torchmt::cli {

// Lines of a file (plain or .gz), or of stdin for "-"; invalid UTF-8 is an error naming
// the source and the line.
std::vector<std::string> read_input_lines(const std::string& path);

}  // namespace torchmt::cli
