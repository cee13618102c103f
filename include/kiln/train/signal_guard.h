// SignalGuard: while one is alive, SIGINT (Ctrl-C) and SIGTERM ask a run to
// stop cleanly instead of killing it: the handler only records the signal
// (an async-signal-safe flag), and the training loop finishes its step,
// writes a checkpoint and exits with 128 + the signal (130, 143), as a shell
// reports a process the signal killed. A second signal exits at once.
//
//   train::SignalGuard signals;                     // in the job, around fit()
//   train::Trainer trainer(epochs, {..., std::make_shared<train::StopOnSignal>(), checkpoints});
//   trainer.fit(task, loader);
//   if (int sig = train::SignalGuard::received()) return 128 + sig;
//
// Loops without a Trainer poll SignalGuard::received() once per iteration.
#pragma once

namespace kiln::train {

class SignalGuard {
 public:
  /// Installs the handlers and clears received(); the destructor puts the
  /// previous handlers back. Guards nest (the outermost one installs).
  SignalGuard();
  ~SignalGuard();
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

  /// The first SIGINT or SIGTERM received while a guard was alive; 0: none.
  static int received();
  /// "SIGINT", "SIGTERM" (or "a signal").
  static const char* name(int signal);
};

}  // namespace kiln::train
