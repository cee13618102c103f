// Callback: hooks the Trainer calls around training (Keras' Callback, spec 002
// oa::Cb*). Callbacks run in registration order at each hook, so a validation
// callback registered before the checkpoint and early-stopping callbacks has
// written "val/loss" into trainer.logs() by the time they read it.
//
//   struct Print : train::Callback {
//     void on_epoch_end(train::Trainer& t) override { t.out() << t.logs().at("loss") << '\n'; }
//   };
#pragma once

#include <string>

namespace kiln::io {
class Checkpoint;
}

namespace kiln::train {

class Trainer;
struct StepResult;

class Callback {
 public:
  virtual ~Callback() = default;

  virtual void on_train_begin(Trainer& trainer) {}
  virtual void on_epoch_begin(Trainer& trainer) {}
  /// Before each training_step; trainer.progress().step_in_epoch counts the
  /// steps of this epoch already done.
  virtual void on_step_begin(Trainer& trainer) {}
  /// After each training_step (one optimizer step): progress already counts it.
  virtual void on_step_end(Trainer& trainer, const StepResult& step) {}
  /// After the epoch's last step; logs() holds the epoch's "loss" and "accuracy".
  virtual void on_epoch_end(Trainer& trainer) {}
  /// Always called once fit() ends, also after a stop or an exception
  /// (trainer.state() tells which).
  virtual void on_train_end(Trainer& trainer) {}

  /// What of this callback a checkpoint holds (T13): register it under a name
  /// unique to the callback, e.g. ckpt.state("early_stopping", *this) or
  /// ckpt.scheduler(sched_, "lr_scheduler"). Default: nothing.
  virtual void checkpoint_objects(io::Checkpoint& ckpt) {}

  /// Live control (T14): a "checkpoint" or "evaluate" command is applied by
  /// the first callback whose hook returns true; none: the command is rejected.
  virtual bool save_now(Trainer& trainer) { return false; }
  virtual bool evaluate_now(Trainer& trainer) { return false; }
};

}  // namespace kiln::train
