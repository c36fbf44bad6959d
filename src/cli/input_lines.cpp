#include "input_lines.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <stdexcept>

#include "data/text_file.h"
#include "util/atomic_file.h"
#include "util/utf8.h"

namespace torchmt::cli {

InputLines::InputLines(const std::string& path, bool strict, std::string done)
    : source_(path == "-" ? "standard input" : path), strict_(strict), done_(std::move(done)) {
  if (path != "-") file_ = std::make_unique<LineReader>(path);
}

InputLines::~InputLines() = default;

OutputText::OutputText(const std::string& path) {
  if (path != "-") file_ = std::make_unique<AtomicFileWriter>(path);
}

OutputText::~OutputText() = default;

void OutputText::write(const std::string& text) {
  if (file_) {
    file_->write(text);
  } else {
    std::cout << text << std::flush;
    if (!std::cout) throw std::runtime_error("cannot write standard output");
  }
}

void OutputText::commit() {
  if (file_) file_->commit();
}

int64_t count_lines(const std::string& path) {
  std::error_code ec;
  if (path == "-" || !std::filesystem::is_regular_file(path, ec)) return -1;
  try {
    LineReader reader(path);
    std::string line;
    int64_t n = 0;
    while (reader.next(line)) ++n;
    return n;
  } catch (const std::exception&) {
    return -1;  // the real read reports what is wrong with the file
  }
}

bool InputLines::is_terminal() const { return !file_ && ::isatty(STDIN_FILENO) == 1; }

bool InputLines::next(std::string& line) {
  if (file_) return file_->next(line);
  if (!std::getline(std::cin, line)) {
    if (std::cin.bad()) throw std::runtime_error("cannot read standard input");
    return false;
  }
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return true;
}

bool InputLines::read(size_t max_lines, std::vector<std::string>& lines) {
  lines.clear();
  std::string line;
  while (lines.size() < max_lines && next(line)) {
    // A byte-order mark (Windows editors write one) is no text of line 1.
    if (++line_number_ == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);
    if (const auto offset = find_invalid_utf8(line)) {
      const std::string where = source_ + ":" + std::to_string(line_number_) + ": invalid UTF-8 at byte " +
                                std::to_string(*offset + 1);
      if (strict_) throw std::runtime_error(where + " (--strict-utf8)");
      size_t replaced = 0;
      line = replace_invalid_utf8(line, &replaced);
      std::cerr << "warning: " << where << ": " << done_ << " with " << replaced << " U+FFFD replacement"
                << (replaced == 1 ? "" : "s") << "\n";
    }
    lines.push_back(std::move(line));
  }
  return !lines.empty();
}

}  // namespace torchmt::cli
