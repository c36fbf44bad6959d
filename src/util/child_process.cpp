#include "util/child_process.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "util/stop_signals.h"

namespace torchmt {
namespace {

// The child's answer: one status byte, then the result or the error message.
constexpr char kDone = 'D', kError = 'E', kStopped = 'S';

void write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;  // the parent went away: nothing left to tell
    data += w;
    n -= static_cast<size_t>(w);
  }
}

[[noreturn]] void answer(int fd, char status, const std::string& payload) {
  write_all(fd, &status, 1);
  write_all(fd, payload.data(), payload.size());
  ::close(fd);
  ::_exit(0);
}

// Waits for the child; its wait status.
int reap(pid_t child) {
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "exit status " + std::to_string(WEXITSTATUS(status));
}

}  // namespace

std::string run_in_child_process(const std::function<std::string()>& work, const std::function<bool()>& stop,
                                 const std::string& what) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error(what + ": cannot create a pipe (" + std::strerror(errno) + ")");
  const pid_t child = ::fork();
  if (child < 0) {
    const int error = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw std::runtime_error(what + ": cannot start a process (" + std::strerror(error) + ")");
  }
  if (child == 0) {
    ::close(fds[0]);
    try {
      answer(fds[1], kDone, work());
    } catch (const StopRequested& e) {
      answer(fds[1], kStopped, e.what());
    } catch (const std::exception& e) {
      answer(fds[1], kError, e.what());
    } catch (...) {
      answer(fds[1], kError, "an unknown error");
    }
  }
  ::close(fds[1]);
  std::string reply;
  char buffer[1 << 16];
  while (true) {
    if (stop && stop()) {
      ::kill(child, SIGKILL);
      ::close(fds[0]);
      reap(child);
      throw StopRequested("interrupted while " + what);
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, 100);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the child closed its end: its answer is complete
    reply.append(buffer, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  const int status = reap(child);
  const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (reply.empty() || !clean)  // a child that died mid-answer left a partial one
    throw std::runtime_error(what + " failed: its process ended without an answer (" + describe_exit(status) + ")");
  const std::string payload = reply.substr(1);
  if (reply[0] == kDone) return payload;
  if (reply[0] == kStopped) throw StopRequested(payload);
  throw std::runtime_error(payload);
}

}  // namespace torchmt
