// SignalGuard (kiln/train/signal_guard.h): SIGINT/SIGTERM recorded by an
// async-signal-safe handler; a second one ends the process at once.
#include "kiln/train/signal_guard.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

namespace kiln::train {

namespace {

// Written by the handler, read by the training loop. A lock-free atomic int
// is async-signal-safe (sig_atomic_t would do as well, but is not ordered
// with the loop's other memory).
std::atomic<int> g_received{0};
static_assert(std::atomic<int>::is_always_lock_free);

int g_depth = 0;  // live guards; only the outermost installs and restores
struct sigaction g_previous_int, g_previous_term;

// Only async-signal-safe calls here: write(2) and _exit(2).
void on_signal(int sig) {
  if (g_received.load() != 0) {
    static const char again[] = "\nkiln: second signal: exiting now, without a checkpoint\n";
    (void)!write(STDERR_FILENO, again, sizeof(again) - 1);
    _exit(128 + sig);
  }
  g_received.store(sig);
  static const char first[] =
      "\nkiln: signal received: finishing the step and saving a checkpoint (send it again to exit at once)\n";
  (void)!write(STDERR_FILENO, first, sizeof(first) - 1);
}

}  // namespace

SignalGuard::SignalGuard() {
  if (g_depth++ > 0) return;
  g_received.store(0);
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESTART: reads and writes the signal interrupts resume instead of
  // failing with EINTR in the middle of loading data or saving.
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, &g_previous_int);
  sigaction(SIGTERM, &action, &g_previous_term);
}

SignalGuard::~SignalGuard() {
  if (--g_depth > 0) return;
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
}

int SignalGuard::received() { return g_received.load(); }

const char* SignalGuard::name(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "a signal";
  }
}

}  // namespace kiln::train
