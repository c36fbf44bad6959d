#include "torchmt/data/text_file.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace torchmt {

struct LineReader::Handle {
  gzFile file = nullptr;
  ~Handle() {
    if (file) gzclose(file);
  }
};

LineReader::LineReader(const std::string& path) : handle_(std::make_unique<Handle>()), path_(path) {
  errno = 0;
  handle_->file = gzopen(path.c_str(), "rb");
  if (!handle_->file) {
    throw std::runtime_error("cannot open '" + path + "': " + (errno ? std::strerror(errno) : "out of memory"));
  }
  // A larger buffer than zlib's 8 KiB default: fewer read calls on big corpora.
  gzbuffer(handle_->file, 1 << 17);
}

LineReader::~LineReader() = default;
LineReader::LineReader(LineReader&&) noexcept = default;
LineReader& LineReader::operator=(LineReader&&) noexcept = default;

bool LineReader::next(std::string& line) {
  line.clear();
  char buffer[8192];
  bool got_any = false;
  while (true) {
    char* r = gzgets(handle_->file, buffer, sizeof(buffer));
    if (!r) {
      int err = 0;
      const char* message = gzerror(handle_->file, &err);
      if (err != Z_OK && err != Z_BUF_ERROR) {
        throw std::runtime_error("error reading '" + path_ + "' after line " + std::to_string(line_number_) + ": " +
                                 (err == Z_ERRNO ? std::strerror(errno) : message));
      }
      // Z_BUF_ERROR at EOF means a truncated gzip stream: report it, do not lose lines quietly.
      if (err == Z_BUF_ERROR) {
        throw std::runtime_error("'" + path_ + "' is truncated (incomplete gzip stream) after line " +
                                 std::to_string(line_number_));
      }
      break;
    }
    got_any = true;
    size_t n = std::strlen(buffer);  // an embedded NUL truncates here; such text is not valid input anyway
    line.append(buffer, n);
    if (n > 0 && buffer[n - 1] == '\n') break;
  }
  if (!got_any) return false;
  if (!line.empty() && line.back() == '\n') line.pop_back();
  if (!line.empty() && line.back() == '\r') line.pop_back();
  ++line_number_;
  return true;
}

std::vector<std::string> read_lines(const std::string& path) {
  LineReader reader(path);
  std::vector<std::string> lines;
  std::string line;
  while (reader.next(line)) lines.push_back(line);
  return lines;
}

int64_t count_lines(const std::string& path) {
  LineReader reader(path);
  std::string line;
  while (reader.next(line)) {
  }
  return reader.line_number();
}

bool is_valid_utf8(const std::string& text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;  // continuation byte, C0/C1 overlong lead, or > U+10FFFF lead
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return false;
    if (cp >= 0xD800 && cp <= 0xDFFF) return false;
    i += len;
  }
  return true;
}

void write_lines(const std::string& path, const std::vector<std::string>& lines) {
  const bool gz = path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  gzFile file = gzopen(path.c_str(), gz ? "wb6" : "wbT");  // T: plain, no gzip header
  if (!file) throw std::runtime_error("cannot write '" + path + "': " + std::strerror(errno));
  bool ok = true;
  for (const auto& line : lines) {
    if (!line.empty() && gzwrite(file, line.data(), static_cast<unsigned>(line.size())) <= 0) ok = false;
    if (gzputc(file, '\n') < 0) ok = false;
  }
  if (gzclose(file) != Z_OK) ok = false;
  if (!ok) throw std::runtime_error("error writing '" + path + "'");
}

}  // namespace torchmt
