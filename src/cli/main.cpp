// torchmt: one binary, several subcommands (vocab, train, translate, evaluate, export, ...).
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <iostream>
#include <string>
#include <vector>

#include <c10/util/Exception.h>

#include "../kernels/cpu_isa.h"
#include "torchmt/util/device.h"
#include "commands.h"
#include "util/atomic_file.h"
#include "util/environment.h"
#include "torchmt/util/strings.h"

namespace {

void print_help(std::ostream& out) {
  out << "torchmt " << TORCHMT_VERSION << " - Transformer machine translation on LibTorch\n\n"
      << "usage: torchmt <command> [options]\n\ncommands:\n";
  for (const auto& c : torchmt::cli::all_commands()) {
    out << "  " << c.name << std::string(c.name.size() < 12 ? 12 - c.name.size() : 1, ' ') << c.summary << "\n";
  }
  out << "\nRun 'torchmt <command> --help' for the options of a command.\n";
}

// Ends the process once a command is done: its output flushed, then _Exit, without running the
// static destructors. Those are LibTorch's (every operator it registered at load taken out of
// its dispatcher again), a noticeable part of a short run; torchmt's own statics hold nothing
// to release (files are committed and threads joined before a command returns).
[[noreturn]] void finish(int code) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(code);
}

// SIGINT/SIGTERM outside the commands that stop gracefully (train, serve, ... install their own):
// the temporaries of unfinished outputs removed, then the signal's own death (exit status 130 /
// 143 to the shell).
extern "C" void die_without_temporaries(int signal_number) {
  torchmt::remove_pending_temporaries();
  std::signal(signal_number, SIG_DFL);
  std::raise(signal_number);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace torchmt::cli;
  // Before LibTorch's libraries first run: they read their instruction-set variables then.
  torchmt::kernels::limit_library_isas();
  // Over a file size limit (ulimit -f, quotas) a write fails with EFBIG and torchmt reports it
  // naming the file, instead of the process being killed mid-write by SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  for (int stop : {SIGINT, SIGTERM})  // (a signal the caller ignores, as nohup does, stays ignored)
    if (std::signal(stop, die_without_temporaries) == SIG_IGN) std::signal(stop, SIG_IGN);
  if (argc < 2) {
    print_help(std::cerr);
    return kExitUsage;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_help(std::cout);
    return kExitOk;
  }
  if (name == "--version") {
    std::cout << "torchmt " << TORCHMT_VERSION << "\n";
    return kExitOk;
  }
  // Every variable of the environment table is checked before any work: a bad value is a usage
  // error, whichever code path would have read it.
  try {
    for (const auto& unknown : torchmt::check_environment())
      std::cerr << "torchmt: warning: " << unknown
                << " is set but is not one of torchmt's variables (see 'torchmt info --environment')\n";
    torchmt::kernels::cpu_isa();  // TORCHMT_CPU_ISA above what this CPU runs: an error now
  } catch (const std::exception& e) {
    std::cerr << "torchmt: error: " << torchmt::escape_control(e.what()) << "\n";
    return kExitUsage;
  }
  torchmt::use_shape_free_cuda_attention();  // the CLI owns its process (util/device.h)
  for (const auto& c : all_commands()) {
    if (c.name != name) continue;
    std::string program = "torchmt " + name;
    std::vector<char*> args(argv + 1, argv + argc);
    args[0] = program.data();
    int code = kExitFailure;
    try {
      code = c.run(static_cast<int>(args.size()), args.data());
    } catch (const c10::Error& e) {
      // LibTorch's message without its backtrace: the first line says what failed.
      // One write each: data-parallel workers share stderr.
      std::cerr << "torchmt " + name + ": error: " +
                       torchmt::escape_control(torchmt::first_line(e.what_without_backtrace())) + "\n"
                << std::flush;
    } catch (const std::bad_alloc&) {
      std::cerr << "torchmt " + name + ": error: out of memory (smaller batches, beams or models need less)\n"
                << std::flush;
    } catch (const std::exception& e) {
      // One line whatever the message quotes (a key or value with a newline in it).
      std::cerr << "torchmt " + name + ": error: " + torchmt::escape_control(e.what()) + "\n" << std::flush;
    }
    // Output that did not reach standard output (a full disk, /dev/full) fails the command,
    // whichever command printed it.
    errno = 0;
    if (code == kExitOk && (!std::cout.flush() || std::fflush(stdout) != 0 || std::ferror(stdout))) {
      const int error = errno;
      std::cerr << "torchmt " + name + ": error: cannot write standard output" +
                       (error != 0 ? std::string(": ") + std::strerror(error) : std::string()) + "\n"
                << std::flush;
      code = kExitFailure;
    }
    finish(code);
  }
  std::cerr << "torchmt: unknown command '" << name << "' (run 'torchmt --help' for the list)\n";
  return kExitUsage;
}
