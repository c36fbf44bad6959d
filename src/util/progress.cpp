#include "util/progress.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "torchmt/util/strings.h"

namespace torchmt {

namespace {

using Clock = std::chrono::steady_clock;

// A terminal redraws often enough to look live; a log gets a line every few seconds.
constexpr std::chrono::milliseconds kTerminalInterval{200};
constexpr std::chrono::milliseconds kLineInterval{5000};

ProgressStyle resolve(ProgressStyle style) {
  if (style != ProgressStyle::kAuto) return style;
  return isatty(STDERR_FILENO) ? ProgressStyle::kTerminal : ProgressStyle::kLines;
}

}  // namespace

Progress::Progress(std::string what, std::string unit, int64_t total, ProgressStyle style)
    : Progress(std::move(what), std::move(unit), total, resolve(style), std::cerr,
               resolve(style) == ProgressStyle::kTerminal ? kTerminalInterval : kLineInterval) {}

Progress::Progress(std::string what, std::string unit, int64_t total, ProgressStyle style, std::ostream& out,
                   std::chrono::milliseconds interval)
    : what_(std::move(what)),
      unit_(std::move(unit)),
      total_(total),
      style_(resolve(style)),
      out_(out),
      interval_(interval),
      start_(Clock::now()),
      last_draw_(start_) {
  // A terminal shows the line at once (as pv and tqdm do), so that even short work says what it did.
  std::lock_guard<std::mutex> lock(mutex_);
  if (style_ == ProgressStyle::kTerminal) draw_locked(false);
}

Progress::Progress(ProgressStyle style) : Progress(style, std::cerr) {}

Progress::Progress(ProgressStyle style, std::ostream& out)
    : total_(-1), style_(resolve(style)), out_(out), interval_(0), start_(Clock::now()), last_draw_(start_) {}

Progress::~Progress() { finish(); }

std::string Progress::describe(const std::string& unit, int64_t done, int64_t total, double seconds) {
  std::string text = with_thousands(done) + " " + unit;
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
  char part[64];
  std::snprintf(part, sizeof part, ", %.1f %s/s", rate, unit.c_str());
  text += part;
  if (total > 0) {
    std::snprintf(part, sizeof part, ", %d%% of ", static_cast<int>(100.0 * static_cast<double>(done) / total));
    text += part + with_thousands(total);
    if (rate > 0 && done < total) text += ", ETA " + clock_text(static_cast<double>(total - done) / rate);
  }
  text += ", " + clock_text(seconds);
  return text;
}

void Progress::draw_locked(bool final) {
  const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  const std::string line = what_ + ": " + describe(unit_, done_, total_, seconds);
  if (style_ == ProgressStyle::kTerminal) {
    // Back to the line's start and clear it: the new figures may be shorter than the old.
    out_ << '\r' << line << "\033[K";
    if (final) out_ << '\n';
  } else {
    out_ << line << '\n';
  }
  out_.flush();
  drawn_ = true;
}

void Progress::add(int64_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  done_ += n;
  if (style_ == ProgressStyle::kQuiet || finished_) return;
  const auto now = Clock::now();
  if (now - last_draw_ < interval_) return;
  last_draw_ = now;
  draw_locked(false);
}

void Progress::status(const std::string& text, bool due) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (style_ == ProgressStyle::kQuiet || finished_) return;
  if (style_ == ProgressStyle::kTerminal) {
    out_ << '\r' << text << "\033[K" << std::flush;
    drawn_ = true;
  } else if (due) {
    out_ << text << '\n' << std::flush;
  }
}

void Progress::line(const std::string& text) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (style_ == ProgressStyle::kQuiet) return;
  if (drawn_) out_ << '\n';
  drawn_ = false;
  out_ << text << '\n' << std::flush;
}

void Progress::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_) return;
  finished_ = true;
  if (what_.empty()) {  // a run's log: end a redrawn status line
    if (drawn_) out_ << '\n' << std::flush;
    return;
  }
  // A terminal line ends with the final figures; a log needs no last line (each command
  // prints its own summary).
  if (style_ == ProgressStyle::kTerminal && drawn_) draw_locked(true);
}

int64_t Progress::done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

}  // namespace torchmt
