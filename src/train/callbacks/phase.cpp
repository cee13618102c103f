// PhaseCallback: maps epochs to phases, prints the preview and banners, and
// sets the phase-relative epoch label.
#include "kiln/train/callbacks/phase.h"

#include <fmt/format.h>

#include <ostream>

#include "kiln/core/error.h"
#include "kiln/train/trainer.h"

namespace kiln::train {
namespace {

const char* epochs_word(int64_t n) { return n == 1 ? "epoch" : "epochs"; }

}  // namespace

PhaseCallback& PhaseCallback::add_phase(std::string name, int64_t epochs, std::function<void(Trainer&)> on_begin) {
  KILN_CHECK(!name.empty(), "PhaseCallback.add_phase", "phase {} has an empty name", phases_.size() + 1);
  KILN_CHECK(epochs > 0, "PhaseCallback.add_phase", "phase '{}' must have at least one epoch, got {}", name, epochs);
  phases_.push_back({std::move(name), epochs, std::move(on_begin)});
  return *this;
}

int64_t PhaseCallback::phase_of(int64_t epoch) const {
  int64_t end = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    end += phases_[i].epochs;
    if (epoch < end) return static_cast<int64_t>(i);
  }
  KILN_FAIL("PhaseCallback", "epoch {} is past the last phase (the phases cover {} epochs)", epoch + 1, end);
}

void PhaseCallback::on_train_begin(Trainer& trainer) {
  KILN_CHECK(!phases_.empty(), "PhaseCallback", "no phases: call add_phase() before training");
  int64_t total = 0;
  for (const Phase& p : phases_) total += p.epochs;
  KILN_CHECK(total == trainer.max_epochs(), "PhaseCallback",
             "the phases cover {} epochs but the trainer runs max_epochs = {}", total, trainer.max_epochs());
  const int64_t steps = trainer.steps_per_epoch();
  std::string s = "phase schedule:\n";
  for (size_t i = 0; i < phases_.size(); ++i)
    s += fmt::format("  {}. {} — {} {} ({} steps)\n", i + 1, phases_[i].name, phases_[i].epochs,
                     epochs_word(phases_[i].epochs), phases_[i].epochs * steps);
  trainer.out() << s << std::flush;
  current_ = -1;
}

void PhaseCallback::on_epoch_begin(Trainer& trainer) {
  // The Trainer calls on_epoch_begin for every epoch it runs, also for the
  // one a mid-epoch checkpoint resumes in.
  const int64_t epoch = trainer.progress().epoch;
  const int64_t index = phase_of(epoch);
  const Phase& phase = phases_[index];
  int64_t first = 0;
  for (int64_t i = 0; i < index; ++i) first += phases_[i].epochs;
  if (index != current_) {
    current_ = index;
    trainer.out() << fmt::format("phase {}/{} — {} · {} {} × {} steps\n", index + 1, phases_.size(), phase.name,
                                 phase.epochs, epochs_word(phase.epochs), trainer.steps_per_epoch())
                  << std::flush;
    trainer.task().set_phase(phase.name);
    if (phase.on_begin) phase.on_begin(trainer);
  }
  trainer.set_epoch_label(epoch - first + 1, phase.epochs);
}

void PhaseCallback::on_train_end(Trainer& trainer) { current_ = -1; }

}  // namespace kiln::train
