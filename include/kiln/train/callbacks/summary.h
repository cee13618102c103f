// Summary (T4): three lines at the end of training, spec 002's CbSummary
// without its GPU line (kiln trains on the CPU); the Wall line carries the
// step latency's p50 and p95 as the spec's GPU line does:
//
//   summary: loss: initial 2.6558 · final 0.2965 · mean 0.4812
//   Wall: 0.07 ms/step · p50 0.068 · p95 0.074 · 943.68K sample/s · 60.40M token/s
//   run: 0.32s · 4686 steps · batch 64 · sequence 64 token/sample
//
// initial / final: the loss of the run's first and last optimizer step; mean:
// the plain mean of every step's loss. Wall rates and "run" seconds are
// training seconds (Trainer::elapsed(), validation and pauses excluded). A
// step's latency is the training time from the previous step's end (or the
// start of training) to its own end; p50 / p95 (ms, three decimals as the
// spec's) are nearest-rank percentiles within 0.5% (LatencyHistogram), shown
// when every counted step's latency is known (a checkpoint from before they
// were recorded leaves them out).
// token/s and "sequence" appear when RunOptions::tokens_per_sample > 0. The
// counters ride in checkpoints ("summary"), so a resumed run's summary covers
// the whole run, not only the part after the resume.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "kiln/io/checkpoint.h"
#include "kiln/train/callback.h"
#include "kiln/train/callbacks/latency_histogram.h"

namespace kiln::train {

class Summary : public Callback, public io::Stateful {
 public:
  void on_train_begin(Trainer& trainer) override;
  void on_step_end(Trainer& trainer, const StepResult& step) override;
  void on_train_end(Trainer& trainer) override;
  void checkpoint_objects(io::Checkpoint& ckpt) override;

  /// The three lines (each ending in '\n'); "summary: no steps\n" before any step.
  std::string text(int64_t batch_size, int64_t tokens_per_sample) const;

  int64_t steps() const { return steps_; }
  int64_t samples() const { return samples_; }
  double seconds() const { return seconds_; }
  double initial_loss() const { return initial_loss_; }
  double final_loss() const { return final_loss_; }
  double mean_loss() const;
  /// Step latency percentiles in milliseconds; NaN unless every step's latency is known.
  double p50_ms() const;
  double p95_ms() const;
  const LatencyHistogram& latency() const { return latency_; }

  /// {"steps", "samples", "seconds", "loss_sum", "initial_loss", "final_loss",
  /// "step_latency"}; a state without "step_latency" (older checkpoints) loads.
  io::State state() const override;
  void load_state(const io::State& state) override;

 private:
  static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  int64_t steps_ = 0;
  int64_t samples_ = 0;
  double seconds_ = 0;   // training seconds up to the last step, over every leg of the run
  double loss_sum_ = 0;  // sum of step losses
  double initial_loss_ = kNaN, final_loss_ = kNaN;
  LatencyHistogram latency_;        // one entry per counted step (fewer after loading an old state)
  double last_step_elapsed_ = 0;    // trainer.elapsed() at the previous step's end (or at train begin)
  // seconds_ = seconds_at_begin_ + trainer.elapsed() - elapsed_at_begin_
  double seconds_at_begin_ = 0, elapsed_at_begin_ = 0;
  bool loaded_ = false;  // load_state ran since the last on_train_begin (a resume)
};

}  // namespace kiln::train
