#include "training/worker_launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <thread>

#include "training/process_group.h"
#include "util/environment.h"
#include "util/stop_signals.h"

namespace torchmt {
int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(std::string("cannot open a socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error(std::string("cannot find a free port on 127.0.0.1: ") + std::strerror(errno));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

namespace {

std::string describe(int status) {
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

}  // namespace

int launch_local_workers(int nproc, const std::vector<std::string>& args) {
  const int nnodes = env_int("NNODES", 1, 1, 1 << 16);
  const int node_rank = env_int("NODE_RANK", 0, 0, 1 << 16);
  if (node_rank >= nnodes)
    throw std::invalid_argument("NODE_RANK " + std::to_string(node_rank) + " must be below NNODES " +
                                std::to_string(nnodes));
  const auto addr_env = env_value("MASTER_ADDR");
  const std::string master_addr = addr_env.value_or("127.0.0.1");
  if (nnodes > 1 && (!addr_env || !env_value("MASTER_PORT")))
    throw std::invalid_argument("NNODES > 1 needs MASTER_ADDR and MASTER_PORT (node 0's address and a free port)");
  const int given_port = env_int("MASTER_PORT", 0, 1, 65535);
  const int master_port = given_port > 0 ? given_port : free_loopback_port();

  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  // Each worker's environment, built before fork(): between fork and exec only
  // async-signal-safe calls.
  const std::vector<std::string> ours{"RANK=", "LOCAL_RANK=", "WORLD_SIZE=", "LOCAL_WORLD_SIZE=", "MASTER_ADDR=",
                                      "MASTER_PORT="};
  std::vector<std::vector<std::string>> envs(static_cast<size_t>(nproc));
  for (int local = 0; local < nproc; ++local) {
    auto& env = envs[static_cast<size_t>(local)];
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string var = *e;
      bool replaced = false;
      for (const auto& prefix : ours) replaced = replaced || var.rfind(prefix, 0) == 0;
      if (!replaced) env.push_back(var);
    }
    env.push_back("RANK=" + std::to_string(node_rank * nproc + local));
    env.push_back("LOCAL_RANK=" + std::to_string(local));
    env.push_back("WORLD_SIZE=" + std::to_string(nnodes * nproc));
    env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(nproc));
    env.push_back("MASTER_ADDR=" + master_addr);
    env.push_back("MASTER_PORT=" + std::to_string(master_port));
  }
  std::vector<std::vector<char*>> envps;
  for (auto& env : envs) {
    std::vector<char*> envp;
    for (auto& v : env) envp.push_back(v.data());
    envp.push_back(nullptr);
    envps.push_back(std::move(envp));
  }

  StopSignals signals;  // the launcher outlives its workers: a signal is passed on, not obeyed
  std::vector<pid_t> pids(static_cast<size_t>(nproc), -1);
  for (int local = 0; local < nproc; ++local) {
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error(std::string("cannot start a worker: ") + std::strerror(errno));
    if (pid == 0) {
      ::execve("/proc/self/exe", argv.data(), envps[static_cast<size_t>(local)].data());
      static const char msg[] = "torchmt: cannot start a data-parallel worker (exec /proc/self/exe failed)\n";
      [[maybe_unused]] const auto n = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
      ::_exit(127);
    }
    pids[static_cast<size_t>(local)] = pid;
  }

  int live = nproc, result = 0;
  bool forwarded = false, failing = false;
  std::chrono::steady_clock::time_point kill_at{};
  auto signal_live = [&](int sig) {
    for (pid_t p : pids)
      if (p > 0) ::kill(p, sig);
  };
  while (live > 0) {
    // Every worker that has ended since the last look: when one is killed, its peers fail at
    // their next collective a moment later, and waitpid may hand either over first.
    struct Ended {
      size_t rank;  // local
      pid_t pid;
      int status;
    };
    std::vector<Ended> ended;
    for (int status = 0;;) {
      const pid_t done = ::waitpid(-1, &status, WNOHANG);
      if (done <= 0) break;
      for (size_t r = 0; r < pids.size(); ++r)
        if (pids[r] == done) {
          ended.push_back({r, done, status});
          pids[r] = -1;
          --live;
        }
    }
    if (!ended.empty()) {
      // The cause first: a worker killed by a signal, else the first that failed.
      std::stable_sort(ended.begin(), ended.end(),
                       [](const Ended& a, const Ended& b) { return WIFSIGNALED(a.status) && !WIFSIGNALED(b.status); });
      for (const Ended& e : ended) {
        const bool ok = WIFEXITED(e.status) && WEXITSTATUS(e.status) == 0;
        if (ok || failing) continue;
        failing = true;
        result = WIFEXITED(e.status) ? WEXITSTATUS(e.status) : 1;
        // One write: the other workers report on the same stderr at this moment.
        std::string line = "torchmt train: worker rank " + std::to_string(node_rank * nproc + static_cast<int>(e.rank)) +
                           " (pid " + std::to_string(e.pid) + ") " + describe(e.status);
        if (live > 0) line += "; stopping the other " + std::to_string(live) + " worker(s)";
        std::cerr << line + "\n" << std::flush;
        signal_live(SIGTERM);
        // They stop at their next collective (the peer is gone), well within the 10 s below;
        // one that is stuck (hung, or stopped) is killed.
        kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      }
      continue;
    }
    if (StopSignals::requested() && !forwarded) {
      forwarded = true;
      signal_live(SIGTERM);
    }
    if (failing && std::chrono::steady_clock::now() > kill_at) {
      signal_live(SIGKILL);
      kill_at = std::chrono::steady_clock::now() + std::chrono::hours(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return result;
}

}  // namespace torchmt
