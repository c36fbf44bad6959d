#include "evaluation/utf8_line_reader.h"

#include <stdexcept>

#include "data/text_file.h"
#include "evaluation/unicode_text.h"

namespace torchmt::evaluation {

std::vector<std::string> read_utf8_lines(const std::string& path) {
  std::vector<std::string> lines = read_lines(path);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (auto offset = find_invalid_utf8(lines[i])) {
      throw std::runtime_error(path + ":" + std::to_string(i + 1) + ": invalid UTF-8 at byte " +
                               std::to_string(*offset + 1));
    }
  }
  return lines;
}

}  // namespace torchmt::evaluation
