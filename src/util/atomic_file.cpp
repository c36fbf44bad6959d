#include "util/atomic_file.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace torchmt {
namespace {

std::string error_text(int error) { return std::strerror(error); }

[[noreturn]] void fail(const std::string& path, int error) {
  throw std::runtime_error("cannot write " + path + ": " + error_text(error));
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  // A unique temporary name: two processes may write the same file (a shared corpus cache).
  tmp_ = path_ + ".tmp.XXXXXX";
  fd_ = ::mkstemp(tmp_.data());
  if (fd_ < 0) fail(path_, errno);
  ::fchmod(fd_, 0644);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) std::remove(tmp_.c_str());
}

void AtomicFileWriter::write(std::string_view bytes) {
  if (fd_ < 0) throw std::logic_error("AtomicFileWriter::write after commit: " + path_);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) abandon(n < 0 ? errno : ENOSPC);
    done += static_cast<size_t>(n);
  }
}

void AtomicFileWriter::abandon(int error) {
  ::close(fd_);
  fd_ = -1;
  std::remove(tmp_.c_str());
  committed_ = true;  // nothing left for the destructor
  fail(path_, error);
}

void AtomicFileWriter::commit() {
  if (fd_ < 0) throw std::logic_error("AtomicFileWriter::commit twice: " + path_);
  if (::fsync(fd_) != 0) abandon(errno);
  const int fd = fd_;
  fd_ = -1;
  int error = ::close(fd) != 0 ? errno : 0;
  if (error == 0 && std::rename(tmp_.c_str(), path_.c_str()) != 0) error = errno;
  if (error != 0) {
    std::remove(tmp_.c_str());
    committed_ = true;
    fail(path_, error);
  }
  committed_ = true;
  // Persist the rename itself.
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void atomic_write(const std::string& path, std::string_view bytes) {
  AtomicFileWriter writer(path);
  writer.write(bytes);
  writer.commit();
}

std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot read " + path + ": " + error_text(errno));
  std::string out;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) out.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      throw std::runtime_error("cannot read " + path + ": " + error_text(error));
    }
    if (n == 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

void atomic_copy(const std::string& from, const std::string& to) { atomic_write(to, read_file(from)); }

namespace {
int remove_entry(const char* path, const struct stat*, int, struct FTW*) { return ::remove(path) == 0 ? 0 : 1; }
}  // namespace

bool remove_tree(const std::string& path) noexcept {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return errno == ENOENT;
  // Depth first (children before their directory), without following links.
  return ::nftw(path.c_str(), remove_entry, 32, FTW_DEPTH | FTW_PHYS) == 0;
}

void replace_directory(const std::string& path, const std::function<void(const std::string& dir)>& fill) {
  namespace fs = std::filesystem;
  const fs::path target = fs::path(path).lexically_normal();
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string tmp = (parent / (target.filename().string() + ".tmp.XXXXXX")).string();
  if (!::mkdtemp(tmp.data())) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
  ::chmod(tmp.c_str(), 0755);
  try {
    fill(tmp);
    std::string old;
    if (fs::exists(target)) {  // the previous directory: moved aside, removed once replaced
      old = (parent / (target.filename().string() + ".old.XXXXXX")).string();
      if (!::mkdtemp(old.data())) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
      if (std::rename(target.c_str(), (old + "/previous").c_str()) != 0)
        throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
    }
    if (std::rename(tmp.c_str(), target.c_str()) != 0) {
      const int error = errno;
      if (!old.empty()) std::rename((old + "/previous").c_str(), target.c_str());
      throw std::runtime_error("cannot write " + path + ": " + std::strerror(error));
    }
    if (!old.empty()) remove_tree(old);
  } catch (...) {
    remove_tree(tmp);
    throw;
  }
}

std::optional<std::string> same_file_twice(const std::vector<NamedPath>& inputs, const std::vector<NamedPath>& outputs) {
  namespace fs = std::filesystem;
  const auto same = [](const std::string& a, const std::string& b) {
    std::error_code ec, ea, eb;
    if (fs::equivalent(a, b, ec)) return true;  // both exist: links and other spellings included
    const fs::path ca = fs::weakly_canonical(a, ea), cb = fs::weakly_canonical(b, eb);
    return !ea && !eb && ca == cb;
  };
  const auto named = [](const std::string& p) { return !p.empty() && p != "-"; };
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto& [out_flag, out] = outputs[i];
    if (!named(out)) continue;
    for (const auto& [in_flag, in] : inputs)
      if (named(in) && same(out, in))
        return out_flag + " '" + out + "' is the " + in_flag + " file: writing it would replace that input";
    for (size_t j = i + 1; j < outputs.size(); ++j)
      if (named(outputs[j].second) && same(out, outputs[j].second))
        return out_flag + " and " + outputs[j].first + " name the same file '" + out + "'";
  }
  return std::nullopt;
}

}  // namespace torchmt
