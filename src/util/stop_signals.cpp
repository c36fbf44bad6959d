#include "util/stop_signals.h"

#include <atomic>
#include <csignal>

namespace torchmt {
namespace {

// Lock-free, so setting it is async-signal-safe.
std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free);

struct sigaction g_old_int {}, g_old_term {};

extern "C" void on_stop_signal(int) { g_stop.store(true); }

}  // namespace

StopSignals::StopSignals(bool install) : installed_(install) {
  g_stop.store(false);
  if (!installed_) return;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

StopSignals::~StopSignals() {
  if (!installed_) return;
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

bool StopSignals::requested() { return g_stop.load(); }
void StopSignals::request() { g_stop.store(true); }

void StopSignals::throw_if_requested(const std::string& during) {
  if (requested()) throw StopRequested("interrupted while " + during);
}

}  // namespace torchmt
