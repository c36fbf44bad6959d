#include "util/atomic_file.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "util/split_mix.h"

namespace torchmt {
namespace {

std::string error_text(int error) { return std::strerror(error); }

[[noreturn]] void fail(const std::string& path, int error) {
  throw std::runtime_error("cannot write " + path + ": " + error_text(error));
}

// The temporaries of the writers alive now, for remove_pending_temporaries(): fixed slots, so
// that a signal handler reads them without allocating or locking.
constexpr int kPendingSlots = 64;
struct PendingSlot {
  std::atomic<int> state{0};  // 0 free, 1 being filled, 2 holds a temporary's path
  char path[4096];
};
PendingSlot pending_slots[kPendingSlots];

int register_pending(const std::string& tmp) {
  if (tmp.size() >= sizeof(PendingSlot::path)) return -1;
  for (int i = 0; i < kPendingSlots; ++i) {
    int expected = 0;
    if (!pending_slots[i].state.compare_exchange_strong(expected, 1)) continue;
    std::memcpy(pending_slots[i].path, tmp.c_str(), tmp.size() + 1);
    pending_slots[i].state.store(2);
    return i;
  }
  return -1;  // more writers than slots: this one's temporary may outlive a signal
}

void unregister_pending(int slot) {
  if (slot >= 0) pending_slots[slot].state.store(0);
}

}  // namespace

void remove_pending_temporaries() noexcept {
  for (auto& slot : pending_slots)
    if (slot.state.load() == 2) ::unlink(slot.path);
}

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  // A link is written through: its target is replaced, the link stays (a dangling one is replaced).
  std::string target = path_;
  struct stat st {};
  const bool link = ::lstat(path_.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
  std::error_code error;
  if (link) {
    const auto resolved = std::filesystem::canonical(path_, error);
    if (!error) target = resolved.string();
  }
  const bool exists = ::stat(target.c_str(), &st) == 0;
  if (exists && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    // A device, FIFO or socket (/dev/null, /dev/stdout, a pipe's name): written as a stream, since
    // renaming a file over it would replace it, and its reader would get nothing.
    fd_ = ::open(target.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) fail(path_, errno);
    stream_ = true;
    return;
  }
  // A unique temporary name: two processes may write the same file (a shared corpus cache).
  // Created with 0666 so that the umask applies, as to any new file; an existing file's mode and
  // owner carry over to its replacement.
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0; fd_ < 0; ++attempt) {
    const uint64_t salt = mix64(static_cast<uint64_t>(::getpid()) * 1000003u + ++counter +
                                static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
    char suffix[7];
    static const char kLetters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    for (int i = 0; i < 6; ++i) suffix[i] = kLetters[(salt >> (6 * i)) % 62];
    suffix[6] = '\0';
    tmp_ = target + ".tmp." + suffix;
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && (errno != EEXIST || attempt > 100)) fail(path_, errno);
  }
  target_ = target;
  pending_ = register_pending(tmp_);
  if (exists && S_ISREG(st.st_mode)) {
    ::fchmod(fd_, st.st_mode & 07777);
    // (An unprivileged writer may not give it away: then it is the writer's, as a new file is.)
    if (::fchown(fd_, st.st_uid, st.st_gid) != 0) errno = 0;
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !stream_) std::remove(tmp_.c_str());
  unregister_pending(pending_);
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
  if (!stream_) std::remove(tmp_.c_str());
  committed_ = true;  // nothing left for the destructor
  fail(path_, error);
}

void AtomicFileWriter::commit() {
  if (fd_ < 0) throw std::logic_error("AtomicFileWriter::commit twice: " + path_);
  if (stream_) {
    const int fd = fd_;
    fd_ = -1;
    committed_ = true;
    if (::close(fd) != 0) fail(path_, errno);  // (fsync has no meaning for a pipe or a device)
    return;
  }
  if (::fsync(fd_) != 0) abandon(errno);
  const int fd = fd_;
  fd_ = -1;
  int error = ::close(fd) != 0 ? errno : 0;
  if (error == 0 && std::rename(tmp_.c_str(), target_.c_str()) != 0) error = errno;
  unregister_pending(pending_);  // (no temporary any more, renamed or not)
  pending_ = -1;
  if (error != 0) {
    std::remove(tmp_.c_str());
    committed_ = true;
    fail(path_, error);
  }
  committed_ = true;
  // Persist the rename itself.
  const std::string dir = std::filesystem::path(target_).parent_path().string();
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
