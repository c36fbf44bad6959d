#include "input_lines.h"

#include <iostream>
#include <stdexcept>

#include "torchmt/data/text_file.h"
#include "torchmt/util/utf8.h"

namespace torchmt::cli {

std::vector<std::string> read_input_lines(const std::string& path, bool strict) {
  std::vector<std::string> lines;
  if (path != "-") {
    lines = read_lines(path);
  } else {
    std::string line;
    while (std::getline(std::cin, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      lines.push_back(std::move(line));
    }
  }
  const std::string source = path == "-" ? "standard input" : path;
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto offset = find_invalid_utf8(lines[i]);
    if (!offset) continue;
    const std::string where = source + ":" + std::to_string(i + 1) + ": invalid UTF-8 at byte " +
                              std::to_string(*offset + 1);
    if (strict) throw std::runtime_error(where + " (--strict-utf8)");
    size_t replaced = 0;
    lines[i] = replace_invalid_utf8(lines[i], &replaced);
    std::cerr << "warning: " << where << ": translated with " << replaced << " U+FFFD replacement"
              << (replaced == 1 ? "" : "s") << "\n";
  }
  return lines;
}

}  // namespace torchmt::cli
