#pragma once
// The one way torchmt writes a file: to a temporary file beside it (PATH.tmp.XXXXXX), flushed and fsync'ed,
// renamed over the target, then the directory fsync'ed. A kill or a full disk at any moment
// leaves either the previous file or the new one, never a partial file, and no temporary.
// The replacement keeps a previous file's mode and (where the writer may) its owner; a link is
// written through to its file; a device, FIFO or socket (/dev/null, /dev/stdout) is written as
// the stream it is. (A hard link's other names keep the previous content, as with any editor
// that saves by renaming.)
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace torchmt {

// The writer behind it, for output produced piece by piece (`translate -o FILE` streams its
// translations): write() appends to the temporary file, commit() makes it the file. Destroyed
// without commit() (an error, an exception on the way), it removes the temporary and the
// previous file stays as it was. Every failure throws "cannot write PATH: REASON".
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  void write(std::string_view bytes);
  void commit();
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void abandon(int error);
  std::string path_, target_, tmp_;  // target_: path_, or the file a link at path_ names
  int fd_ = -1;
  bool committed_ = false;
  bool stream_ = false;  // path_ is a device, FIFO or socket: written directly, nothing renamed
  int pending_ = -1;     // its slot for remove_pending_temporaries()
};

// Removes the temporary file of every writer alive (neither committed nor destroyed). Async-
// signal-safe: for a program's SIGINT/SIGTERM handler before the process dies (the CLI's), so
// that an interrupted `translate -o FILE` leaves no PATH.tmp.XXXXXX. The library installs none.
void remove_pending_temporaries() noexcept;

// Throws std::runtime_error "cannot write PATH: REASON" (reason from errno: "No space left
// on device", "Permission denied", ...) after removing the temporary file.
void atomic_write(const std::string& path, std::string_view bytes);

// atomic_write of a file's current content (checkpoint_best.pt from checkpoint_last.pt).
void atomic_copy(const std::string& from, const std::string& to);

// The whole content of a file; throws std::runtime_error "cannot read PATH: REASON".
std::string read_file(const std::string& path);

// Removes a file or a directory tree (links are removed, not followed); false if something
// could not be removed. Not std::filesystem::remove_all: the CUDA PyTorch 2.11 wheel's
// libtorch.so exports its own copy of that function, which a program linked to it calls, and
// which jumps to address 0 (seen on the GPU machine: every test using a temporary directory).
bool remove_tree(const std::string& path) noexcept;

// A directory written whole or not at all: `fill` writes the files into a fresh directory beside
// `path`, which then takes path's place (a previous directory there is removed once replaced).
// The caller decides beforehand whether `path` may be replaced.
void replace_directory(const std::string& path, const std::function<void(const std::string& dir)>& fill);

// A file named as an output and as an input, or as two outputs ({name, path} pairs, a name being
// the flag or field; "-" and "" are skipped). Writing it would replace an input the user may have
// only there, or one output with the other: callers refuse it before any work. The message naming
// both, or nullopt.
using NamedPath = std::pair<std::string, std::string>;
std::optional<std::string> same_file_twice(const std::vector<NamedPath>& inputs, const std::vector<NamedPath>& outputs);

}  // namespace torchmt
