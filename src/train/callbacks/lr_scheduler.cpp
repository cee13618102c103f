// LRSchedulerCallback: steps the scheduler after each optimizer step or epoch
// and writes its lr into the optimizer and logs()["lr"].
#include "kiln/train/callbacks/lr_scheduler.h"

#include "kiln/core/error.h"
#include "kiln/io/checkpoint.h"
#include "kiln/optim/optimizer.h"
#include "kiln/optim/schedulers.h"
#include "kiln/train/trainer.h"

namespace kiln::train {

LRSchedulerCallback::LRSchedulerCallback(std::shared_ptr<optim::LRScheduler> scheduler, Interval interval,
                                         std::string monitor)
    : scheduler_(std::move(scheduler)), plateau_(nullptr), interval_(interval), monitor_(std::move(monitor)) {
  KILN_CHECK(scheduler_ != nullptr, "LRSchedulerCallback", "scheduler is null");
  plateau_ = dynamic_cast<optim::ReduceOnPlateauScheduler*>(scheduler_.get());
  KILN_CHECK(!plateau_ || interval_ == Interval::epoch, "LRSchedulerCallback",
             "ReduceOnPlateauScheduler steps with a metric once per epoch: use Interval::epoch");
  KILN_CHECK(!plateau_ || !monitor_.empty(), "LRSchedulerCallback", "monitor is empty");
}

void LRSchedulerCallback::catch_up(Trainer& trainer, int64_t target) {
  // Only forward: a scheduler handed over already advanced keeps its place.
  while (scheduler_->last_step() < target) scheduler_->step();
  scheduler_->apply(trainer.task().optimizer());
  trainer.logs()["lr"] = scheduler_->get_lr();
}

void LRSchedulerCallback::on_train_begin(Trainer& trainer) {
  if (plateau_) {
    // Its lr moves only with the metric; the optimizer gets the current one.
    scheduler_->apply(trainer.task().optimizer());
    trainer.logs()["lr"] = scheduler_->get_lr();
    return;
  }
  const io::Progress& p = trainer.progress();
  catch_up(trainer, interval_ == Interval::step ? p.global_step : p.epoch);
}

void LRSchedulerCallback::on_epoch_begin(Trainer& trainer) {
  if (interval_ == Interval::epoch && !plateau_) catch_up(trainer, trainer.progress().epoch);
}

void LRSchedulerCallback::on_step_end(Trainer& trainer, const StepResult& step) {
  if (interval_ != Interval::step) return;
  trainer.logs()["lr"] = scheduler_->step(trainer.task().optimizer());
}

void LRSchedulerCallback::on_epoch_end(Trainer& trainer) {
  if (interval_ != Interval::epoch) return;
  optim::Optimizer& opt = trainer.task().optimizer();
  if (plateau_) {
    auto it = trainer.logs().find(monitor_);
    KILN_CHECK(it != trainer.logs().end(), "LRSchedulerCallback",
               "ReduceOnPlateauScheduler monitors '{}', which logs() does not have at this epoch's end (register "
               "the callback that writes it first)",
               monitor_);
    trainer.logs()["lr"] = plateau_->step(it->second, opt);
    return;
  }
  trainer.logs()["lr"] = scheduler_->step(opt);
}

void LRSchedulerCallback::checkpoint_objects(io::Checkpoint& ckpt) { ckpt.scheduler(*scheduler_, "lr_scheduler"); }

}  // namespace kiln::train
