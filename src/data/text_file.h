#pragma once
// Line-oriented reading of plain or gzip-compressed UTF-8 text (zlib reads both
// transparently, so `.gz` needs no special casing by the caller).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace torchmt {

// Streams lines one at a time, so that a large corpus need not fit in memory (the vocab
// trainer samples from it). Strips the trailing "\n" and "\r\n".
class LineReader {
 public:
  // Throws std::runtime_error naming the file when it is missing or unreadable.
  explicit LineReader(const std::string& path);
  ~LineReader();
  LineReader(LineReader&&) noexcept;
  LineReader& operator=(LineReader&&) noexcept;

  // Reads the next line into `line`; false at end of file. Throws on a read error.
  bool next(std::string& line);
  // Lines longer than this many bytes come back cut to it, with truncated() true (the rest of
  // the line is read and dropped: a 50 MB line without a newline costs no 50 MB). Default: no cap.
  void set_max_line_bytes(size_t bytes) { max_line_bytes_ = bytes; }
  bool truncated() const { return truncated_; }  // of the last line next() returned
  int64_t line_number() const { return line_number_; }  // lines returned so far
  const std::string& path() const { return path_; }

 private:
  struct Handle;
  std::unique_ptr<Handle> handle_;
  std::string path_;
  int64_t line_number_ = 0;
  size_t max_line_bytes_ = static_cast<size_t>(-1);
  bool truncated_ = false;
};

// Every line of a plain or .gz file.
std::vector<std::string> read_lines(const std::string& path);

// Number of lines, without keeping them.
int64_t count_lines(const std::string& path);


// Writes `lines` (each followed by "\n"), gzip-compressed when `path` ends in ".gz".
void write_lines(const std::string& path, const std::vector<std::string>& lines);

}  // namespace torchmt
