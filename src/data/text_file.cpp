#include "data/text_file.h"

#include "util/atomic_file.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace torchmt {

struct LineReader::Handle {
  static constexpr size_t kCapacity = 1 << 17;  // bytes per gzread: fewer calls on big corpora
  gzFile file = nullptr;
  // Bytes read ahead; lines are cut from them at '\n' (NUL bytes included). Allocated once and
  // never zero-filled: a small file touches one page of it, not 32.
  std::unique_ptr<char[]> buffer{new char[kCapacity]};
  size_t size = 0, pos = 0;
  bool eof = false;
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
  // zlib's own buffer as large as ours (its default is 8 KiB).
  gzbuffer(handle_->file, Handle::kCapacity);
}

LineReader::~LineReader() = default;
LineReader::LineReader(LineReader&&) noexcept = default;
LineReader& LineReader::operator=(LineReader&&) noexcept = default;

bool LineReader::next(std::string& line) {
  // gzread and a search for '\n', not gzgets: gzgets's C string would end a line at an
  // embedded NUL byte and glue the rest of the file's lines together.
  Handle& h = *handle_;
  line.clear();
  truncated_ = false;
  bool got_any = false;
  // Bytes beyond max_line_bytes_ are dropped as they come: memory stays bounded by the cap.
  auto append = [&](const char* bytes, size_t n) {
    const size_t room = max_line_bytes_ > line.size() ? max_line_bytes_ - line.size() : 0;
    if (n > room) truncated_ = true;
    line.append(bytes, std::min(n, room));
  };
  while (true) {
    const char* begin = h.buffer.get() + h.pos;
    const size_t available = h.size - h.pos;
    if (const void* nl = std::memchr(begin, '\n', available)) {
      const size_t n = static_cast<size_t>(static_cast<const char*>(nl) - begin);
      append(begin, n);
      h.pos += n + 1;
      got_any = true;
      break;
    }
    if (available > 0) got_any = true;
    append(begin, available);
    h.pos = h.size = 0;
    if (h.eof) break;
    const int n = gzread(h.file, h.buffer.get(), static_cast<unsigned>(Handle::kCapacity));
    if (n <= 0) {
      h.eof = true;
      int err = 0;
      const char* message = gzerror(h.file, &err);
      // Z_BUF_ERROR at EOF means a truncated gzip stream: report it, do not lose lines quietly.
      if (err == Z_BUF_ERROR) {
        throw std::runtime_error("'" + path_ + "' is truncated (incomplete gzip stream) after line " +
                                 std::to_string(line_number_));
      }
      if (n < 0 || err != Z_OK) {
        throw std::runtime_error("error reading '" + path_ + "' after line " + std::to_string(line_number_) + ": " +
                                 (err == Z_ERRNO ? std::strerror(errno) : message));
      }
    } else {
      h.size = static_cast<size_t>(n);
    }
  }
  if (!got_any) return false;
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

void write_lines(const std::string& path, const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& line : lines) text += line + "\n";
  const bool gz = path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  if (!gz) return atomic_write(path, text);
  z_stream z{};
  if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16 /* gzip header */, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("cannot write '" + path + "': zlib initialisation failed");
  std::string out(deflateBound(&z, static_cast<uLong>(text.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(text.data());
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int status = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (status != Z_STREAM_END) throw std::runtime_error("cannot write '" + path + "': compression failed");
  atomic_write(path, out);
}

}  // namespace torchmt
