#pragma once
// Input lines for `translate`, `score` and `detect`: a file (plain or .gz) or standard input, read
// whole or in windows (`translate` streams: memory is bounded by the window, not the input).
//
// Invalid UTF-8: with `strict`, an error naming the source, the line and the byte; otherwise
// the bad bytes become U+FFFD and a warning naming the line goes to stderr (one bad line must
// not cost the others their translation).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace torchmt {
class AtomicFileWriter;
class LineReader;
}

namespace torchmt::cli {

class InputLines {
 public:
  // `done`: what the warning says happens to a repaired line ("translated", "scored").
  InputLines(const std::string& path, bool strict, std::string done = "read");
  ~InputLines();
  // Replaces `lines` with the next at most `max_lines` lines; false (and empty) at the end.
  bool read(size_t max_lines, std::vector<std::string>& lines);
  bool is_terminal() const;  // standard input from a terminal: a person typing

 private:
  bool next(std::string& line);
  std::string source_;  // the file's name, or "standard input"
  bool strict_;
  std::string done_;
  std::unique_ptr<LineReader> file_;
  int64_t line_number_ = 0;
};

// Where `translate` and `score` write, window by window: -o FILE (appears whole at commit(),
// never half: util/atomic_file.h) or standard output ("-", flushed after every window).
class OutputText {
 public:
  explicit OutputText(const std::string& path);
  ~OutputText();
  void write(const std::string& text);  // throws "cannot write ..." naming the file or stdout
  void commit();                        // the file takes its name; nothing for stdout
  bool to_file() const { return file_ != nullptr; }

 private:
  std::unique_ptr<AtomicFileWriter> file_;
};

// The lines of a regular file (plain or .gz), read once ahead for a progress total; -1 for
// standard input or anything that cannot be read twice (a pipe).
int64_t count_lines(const std::string& path);

}  // namespace torchmt::cli
