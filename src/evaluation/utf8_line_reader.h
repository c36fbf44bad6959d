#pragma once
// Reads a hypothesis or reference file for scoring: every line (plain or .gz), each checked to
// be UTF-8 so that a bad byte is reported with its file and line instead of skewing a score.
#include <string>
#include <vector>

namespace torchmt::evaluation {

// Throws std::runtime_error naming the file when it cannot be read, and
// "PATH:LINE: invalid UTF-8 at byte OFFSET" for a bad line (LINE and OFFSET 1-based).
std::vector<std::string> read_utf8_lines(const std::string& path);

}  // namespace torchmt::evaluation
