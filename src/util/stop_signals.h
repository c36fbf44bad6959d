#pragma once
// SIGINT / SIGTERM as a request to stop, not a kill: while a StopSignals lives, either signal
// sets a flag that the owner's loop polls (the trainer saves a checkpoint and returns; the
// server stops accepting, finishes what is in flight and exits 0). The previous handlers come
// back when it is destroyed. One at a time per process.
#include <stdexcept>
#include <string>

namespace torchmt {

// A long step that saw a stop request and ended early (nothing it wrote is left half-done).
class StopRequested : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class StopSignals {
 public:
  // Clears the flag and installs the handlers (`install` false: only clears it, for a library
  // call inside a program that keeps its own handlers; request() still stops the owner).
  explicit StopSignals(bool install = true);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  static bool requested();  // a signal arrived (or request() was called) since construction
  static void request();    // as if a signal had arrived (tests, embedding programs)
  // Throws StopRequested ("interrupted while <during>") when requested().
  static void throw_if_requested(const std::string& during);

 private:
  bool installed_;
};

}  // namespace torchmt
