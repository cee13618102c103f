// ProgressBar (T3): one line per epoch in spec 002's format, rewritten in
// place on a terminal; one line per epoch at its end otherwise.
//
//   epoch 1/5 938/938 |██████████| 0.65s · 0.7 ms/step · 1.26M sample/s · accuracy: 0.9091 · loss: 0.2914
//
//   train::Trainer trainer(5, {std::make_shared<train::Validation>(test), std::make_shared<train::ProgressBar>()});
//
// Fields: the epoch label (Trainer::epoch_label(), phase-relative under a
// PhaseCallback), steps done / steps per epoch, 10 cells filled
// floor(10 * step / steps), training seconds of the epoch (validation
// excluded), ms per step and samples per second over the steps this process ran
// in the epoch, then the epoch's running accuracy (omitted when no step
// classifies) and running sample-weighted mean loss. At the epoch's end the
// results of every Validation callback that evaluated this very step follow
// ("· val/loss: 0.3486 · val/accuracy: 0.8765"). Details: docs/callbacks.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "kiln/train/callback.h"

namespace kiln::train {

struct ProgressBarOptions {
  double refresh = 0.1;  // seconds between two redraws on a terminal (the epoch's last step always redraws)
};

class ProgressBar : public Callback {
 public:
  explicit ProgressBar(ProgressBarOptions options = {});

  void on_train_begin(Trainer& trainer) override;
  void on_epoch_begin(Trainer& trainer) override;
  void on_step_begin(Trainer& trainer) override;
  void on_step_end(Trainer& trainer, const StepResult& step) override;
  void on_epoch_end(Trainer& trainer) override;
  void on_train_end(Trainer& trainer) override;

  /// The line as it stands now (without '\r', erase or '\n'); with_val adds
  /// the fresh Validation results.
  std::string line(const Trainer& trainer, bool with_val) const;

 private:
  void mark_epoch_start(const Trainer& trainer);
  void compose(const Trainer& trainer, bool with_val, std::string& out) const;
  void draw(Trainer& trainer, bool with_val, bool end_line);

  ProgressBarOptions options_;
  std::string buf_;  // the line, reused so a redraw allocates nothing once it has grown
  // Where this process began counting the epoch (the epoch's start, or the
  // resume point of a checkpoint saved mid-epoch): the rate columns cover
  // the steps run since then.
  int64_t base_steps_ = 0, base_count_ = 0;
  double base_seconds_ = 0;
  bool epoch_marked_ = false;
  bool pending_ = false;      // steps shown since the last completed line
  bool epoch_drawn_ = false;  // the line of this epoch has been drawn (terminal)
  std::chrono::steady_clock::time_point last_draw_{};
};

/// "0.7" for 0.69 ms: one decimal, and below 0.1 as many as one significant
/// digit needs ("0.07", "0.007"); "0.0" for zero.
std::string format_ms(double milliseconds);
/// "943.68K", "1.26M", "3.10G", "512.00": two decimals with an SI suffix.
std::string format_rate(double per_second);

}  // namespace kiln::train
