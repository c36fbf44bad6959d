#include "input_lines.h"

#include <iostream>
#include <stdexcept>

#include "torchmt/evaluation/utf8_line_reader.h"
#include "torchmt/util/utf8.h"

namespace torchmt::cli {

std::vector<std::string> read_input_lines(const std::string& path) {
  if (path != "-") return evaluation::read_utf8_lines(path);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!is_valid_utf8(line))
      throw std::runtime_error("standard input line " + std::to_string(lines.size() + 1) + ": invalid UTF-8");
    lines.push_back(std::move(line));
  }
  return lines;
}

}  // namespace torchmt::cli
