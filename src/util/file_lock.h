#pragma once
// An exclusive lock on a file for an object's lifetime (flock): one writer per run directory.
// The kernel drops the lock when its process dies, so a lock file left by a killed run is
// never stale: the next run takes it.
#include <string>

namespace torchmt {

class FileLock {
 public:
  // Creates `path` if needed, locks it and writes this process's id into it. Throws
  // std::runtime_error "WHAT is in use by another process (pid N; lock PATH)" when another
  // holder has it, or naming PATH when it cannot be created.
  FileLock(const std::string& path, const std::string& what);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace torchmt
