#pragma once
// Progress of long work on stderr, as pv or tqdm show it: on a terminal one line redrawn in
// place (done, rate, and with a known total the share and an ETA); in a pipe or a log a plain
// line every few seconds; with --quiet nothing. Thread-safe: workers may add() concurrently.
// A run that writes its own figures (training) uses status() and line() instead of add().
#include <chrono>
#include <cstdint>
#include <mutex>
#include <ostream>
#include <string>

namespace torchmt {

enum class ProgressStyle {
  kAuto,      // redrawn on a terminal (stderr is a tty), plain lines otherwise
  kTerminal,  // redrawn in place
  kLines,     // a plain line every interval
  kQuiet,     // nothing
};

class Progress {
 public:
  // `what`: the work ("translate"); `unit`: what is counted ("lines"); `total` < 0: unknown.
  Progress(std::string what, std::string unit, int64_t total, ProgressStyle style = ProgressStyle::kAuto);
  // Draws to `out` instead of stderr (tests), every `interval` (redraws and plain lines alike).
  Progress(std::string what, std::string unit, int64_t total, ProgressStyle style, std::ostream& out,
           std::chrono::milliseconds interval);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // A run's log without counted work (what is empty): status() and line() only.
  explicit Progress(ProgressStyle style);
  Progress(ProgressStyle style, std::ostream& out);

  void add(int64_t n);
  // The run's own status: redrawn in place on a terminal; as a plain line where `due` (the
  // caller's cadence) otherwise.
  void status(const std::string& text, bool due);
  // A line that stays (ends a redrawn one first).
  void line(const std::string& text);
  // Ends the line on a terminal (the last figures stay on screen); nothing more is drawn.
  void finish();
  int64_t done() const;

  // "1,234 lines, 56.7 lines/s, 12% of 10,000, ETA 2:31" (what one draw shows).
  static std::string describe(const std::string& unit, int64_t done, int64_t total, double seconds);

 private:
  void draw_locked(bool final);
  std::string what_, unit_;
  int64_t total_, done_ = 0;
  ProgressStyle style_;
  std::ostream& out_;
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  bool drawn_ = false, finished_ = false;
  mutable std::mutex mutex_;
};

}  // namespace torchmt
