#pragma once
// Small string helpers shared by every layer.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace torchmt {

// ASCII whitespace: space, \t, \n, \r, \f, \v (what separates words in torchmt's text scanners).
inline bool is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// 1234567 -> "1,234,567" (counts in messages).
std::string with_thousands(int64_t n);

// Appends `value` as printf's %.<digits>f: fixed and locale-free (6 digits: enough for a log-probability).
void append_number(std::string& out, double value, int digits = 6);

// Seconds as a clock, rounded: 50 -> "0:50", 150 -> "2:30", 3725 -> "1:02:05" (progress, ETAs).
std::string clock_text(double seconds);

// 64-bit FNV-1a of `bytes` as 16 hex digits: a cheap content id (tokenizer models, cache
// keys), not a cryptographic hash.
std::string fnv1a_hex(const std::string& bytes);

// `text` with control characters (and DEL) written as \n, \t, \r or \xHH: for quoting input in
// a one-line error message.
std::string escape_control(std::string_view text);

// The text before the first '\n': LibTorch's errors carry a backtrace or context lines after it.
inline std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// Line numbers a job passed over or changed (lines cut to what a model accepts, ...): the first
// few kept, so a warning can name them without flooding stderr on a corpus where thousands are.
class LineSample {
 public:
  explicit LineSample(size_t keep = 10) : keep_(keep) {}
  void add(int64_t line) {  // 1-based
    ++count_;
    if (first_.size() < keep_) first_.push_back(line);
  }
  // Another sample's lines, after this one's.
  void merge(const LineSample& other) {
    count_ += other.count_;
    for (int64_t line : other.first_)
      if (first_.size() < keep_) first_.push_back(line);
  }
  int64_t count() const { return count_; }
  // "line 17", "lines 17, 203 and 5 more"; "" when none.
  std::string describe() const;

 private:
  size_t keep_;
  int64_t count_ = 0;
  std::vector<int64_t> first_;
};

}  // namespace torchmt
