// StopOnSignal (kiln/train/callbacks/stop_on_signal.h): polls the signal flag after each step.
#include "kiln/train/callbacks/stop_on_signal.h"

#include <fmt/format.h>

#include <ostream>

#include "kiln/train/signal_guard.h"
#include "kiln/train/trainer.h"

namespace kiln::train {

void StopOnSignal::on_step_end(Trainer& trainer, const StepResult&) {
  const int sig = SignalGuard::received();
  if (sig == 0 || signal_ != 0) return;
  signal_ = sig;
  trainer.out() << fmt::format("{} at step {}: stopping and saving a checkpoint\n", SignalGuard::name(sig),
                               trainer.progress().global_step)
                << std::flush;
  trainer.request_stop();
}

}  // namespace kiln::train
