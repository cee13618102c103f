// StopOnSignal: ends training after the current step once a SIGINT or SIGTERM
// has arrived under a SignalGuard (kiln/train/signal_guard.h). The stop is an
// ordinary one (RunState::completed), so a CheckpointCallback saves where the
// run stopped and fit(..., latest()) continues from there.
//
//   train::SignalGuard signals;
//   train::Trainer trainer(10, {std::make_shared<train::StopOnSignal>(), progress, checkpoints});
#pragma once

#include "kiln/train/callback.h"

namespace kiln::train {

class StopOnSignal : public Callback {
 public:
  void on_step_end(Trainer& trainer, const StepResult& step) override;
  /// The signal that stopped this run; 0: none.
  int signal() const { return signal_; }

 private:
  int signal_ = 0;
};

}  // namespace kiln::train
