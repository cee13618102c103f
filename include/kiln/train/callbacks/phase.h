// PhaseCallback (T7): training as consecutive phases of whole epochs (spec 002
// CbPhase): a schedule preview at train begin, a banner on entering each
// phase, Task::set_phase and an on-begin hook, phase-relative epoch labels.
//
//   auto phases = std::make_shared<train::PhaseCallback>();
//   phases->add_phase("warmup", 1, [&](train::Trainer&) { sched = warmup; })
//          .add_phase("main", 10);
//   train::Trainer trainer(11, {phases, std::make_shared<train::ProgressBar>()});
//
//   phase schedule:
//     1. warmup — 1 epoch (2000 steps)
//     2. main — 10 epochs (20000 steps)
//   phase 1/2 — warmup · 1 epoch × 2000 steps
//   epoch 1/1 2000/2000 |██████████| ...
//
// The phases' epochs must sum to the Trainer's max_epochs (checked at train
// begin). A resumed run enters the phase it resumes in (banner, set_phase,
// hook) as if it were beginning; the phase follows from the epoch, so no
// state rides in checkpoints.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiln/train/callback.h"

namespace kiln::train {

class PhaseCallback : public Callback {
 public:
  struct Phase {
    std::string name;
    int64_t epochs = 0;
    std::function<void(Trainer&)> on_begin;
  };

  /// Appends a phase of `epochs` epochs; on_begin runs on entering it, after
  /// Task::set_phase(name).
  PhaseCallback& add_phase(std::string name, int64_t epochs, std::function<void(Trainer&)> on_begin = {});

  void on_train_begin(Trainer& trainer) override;
  void on_epoch_begin(Trainer& trainer) override;
  void on_train_end(Trainer& trainer) override;

  const std::vector<Phase>& phases() const { return phases_; }
  /// The 0-based phase of 0-based `epoch` (epoch < the phases' total).
  int64_t phase_of(int64_t epoch) const;
  /// The phase entered last, -1 outside training.
  int64_t current() const { return current_; }

 private:
  std::vector<Phase> phases_;
  int64_t current_ = -1;
};

}  // namespace kiln::train
