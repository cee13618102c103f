// What every Trainer-based job of the command line adds around fit(): the
// callback that deletes a run --overwrite moved aside once the new run has a
// checkpoint, and the one-line message for a run stopped by a NaN loss.
#pragma once

#include <memory>
#include <string>

#include "apps/kiln/run_folder.h"
#include "kiln/train/callbacks/checkpoint.h"
#include "kiln/train/trainer.h"

namespace kiln::app {

/// Calls folder.first_checkpoint_written() as soon as `checkpoints` has saved
/// one. Register it after the CheckpointCallback.
class ReleasePreviousRun : public train::Callback {
 public:
  ReleasePreviousRun(RunFolder& folder, std::shared_ptr<const train::CheckpointCallback> checkpoints)
      : folder_(folder), checkpoints_(std::move(checkpoints)) {}
  void on_step_end(train::Trainer&, const train::StepResult&) override { check(); }
  void on_epoch_end(train::Trainer&) override { check(); }
  void on_train_end(train::Trainer&) override { check(); }

 private:
  void check() {
    if (!checkpoints_->latest().empty()) folder_.first_checkpoint_written();
  }
  RunFolder& folder_;
  std::shared_ptr<const train::CheckpointCallback> checkpoints_;
};

/// The end of every job's summary line: the thread count and what kiln chose
/// for this CPU, e.g. "2 threads · AMD EPYC 7B13: avx2+fma; kernels avx2; bf16
/// computes in f32" (kiln::cpu_info()).
std::string threads_and_cpu();

/// "stop" or "skip" (--on-nan) as the Trainer's option; kiln::Error otherwise.
train::OnNan parse_on_nan(const std::string& op, const std::string& value);

/// The job's error for a run the Trainer stopped on a non-finite loss: the
/// step, and the last good checkpoint to resume from.
[[noreturn]] void fail_on_nan(const std::string& op, const train::NonFiniteLoss& e, const std::string& last_checkpoint);

}  // namespace kiln::app
