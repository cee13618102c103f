// LRSchedulerCallback (T6): drives an optim::LRScheduler from the Trainer
// (spec 002 LrSchedulerCallback), per optimizer step or per epoch.
//
//   auto sched = std::make_shared<optim::CosineScheduler>(optim::CosineOptions{.max_lr = 0.1, .total_steps = 1000});
//   train::Trainer trainer(10, {std::make_shared<train::LRSchedulerCallback>(sched)});
//
// Step interval: the optimizer step with global index g (0-based) runs with
// lr(g); the scheduler steps after each optimizer step. Epoch interval: epoch
// e (0-based) runs with lr(e); it steps after each epoch. Either way the new lr
// goes into the optimizer (LRScheduler::apply) and into logs()["lr"].
// ReduceOnPlateauScheduler needs Interval::epoch and steps with
// logs()[monitor] at each epoch end (register it after the Validation
// callback that writes "val/loss").
//
// The scheduler rides in checkpoints ("lr_scheduler"); at train begin (and at
// each epoch begin for Interval::epoch) it is caught up to the steps already
// done, so a checkpoint saved before this callback's hook ran resumes right too.
#pragma once

#include <memory>
#include <string>

#include "kiln/train/callback.h"

namespace kiln::optim {
class LRScheduler;
class ReduceOnPlateauScheduler;
}  // namespace kiln::optim

namespace kiln::train {

class LRSchedulerCallback : public Callback {
 public:
  enum class Interval { step, epoch };

  explicit LRSchedulerCallback(std::shared_ptr<optim::LRScheduler> scheduler, Interval interval = Interval::step,
                               std::string monitor = "val/loss");

  void on_train_begin(Trainer& trainer) override;
  void on_epoch_begin(Trainer& trainer) override;
  void on_step_end(Trainer& trainer, const StepResult& step) override;
  void on_epoch_end(Trainer& trainer) override;
  void checkpoint_objects(io::Checkpoint& ckpt) override;

  optim::LRScheduler& scheduler() const { return *scheduler_; }
  Interval interval() const { return interval_; }

 private:
  // Steps the scheduler until last_step() == target, then applies it.
  void catch_up(Trainer& trainer, int64_t target);

  std::shared_ptr<optim::LRScheduler> scheduler_;
  optim::ReduceOnPlateauScheduler* plateau_;  // scheduler_ when it is one, else nullptr
  Interval interval_;
  std::string monitor_;
};

}  // namespace kiln::train
