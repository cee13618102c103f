// Trainer (T1): the epoch loop around a Task, with callbacks (T3-T11), resume
// from a checkpoint including callback state (T13) and live control (T14).
//
//   train::Task task(model, opt, &rngs);
//   data::DataLoader loader(train_set, {.batch_size = 64});
//   train::Trainer trainer(10, {std::make_shared<train::ProgressBar>(),
//                               std::make_shared<train::Validation>(test_loader)});
//   train::History h = trainer.fit(task, loader);          // or fit(task, loader, "ckpt/step-938.safetensors")
//
// Each step: on_step_begin, task.training_step(batch), the step is counted
// (progress, epoch sums, logs "loss"), on_step_end, then queued live-control
// commands are applied. At an epoch's end logs() holds the epoch's
// sample-weighted mean "loss" and, when steps report correct counts,
// "accuracy"; then on_epoch_end runs. The Trainer never differentiates: the
// step owns its update.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/io/checkpoint.h"
#include "kiln/train/callback.h"
#include "kiln/train/distributed.h"
#include "kiln/train/task.h"

namespace kiln::data {
class DataLoader;
}

namespace kiln::train {

class Control;

enum class RunState { idle, running, paused, stopping, completed, failed };
/// "idle", "running", "paused", "stopping", "completed", "failed".
const char* to_string(RunState state);

/// What fit() does with a step whose loss is NaN or infinite (or whose
/// gradients were, StepResult::applied false).
///   stop: end the run with NonFiniteLoss before the step is counted (Keras'
///         TerminateOnNaN, on by default): no callback sees the step, so no
///         checkpoint of it is written, and the run ends as failed.
///   skip: count the step (the batch is consumed, schedules advance) but leave
///         it out of the epoch's loss and accuracy, as mixed-precision grad
///         scalers skip an overflowed step. Only sound when the step did not
///         apply its update: the reference steps (train::update) and the
///         kiln jobs' steps check the loss before backward.
enum class OnNan { stop, skip };

/// Thrown by fit() under OnNan::stop: the step's loss was NaN or infinite,
/// or (finite loss) its gradients were and the step did not apply them.
class NonFiniteLoss : public Error {
 public:
  /// step: the 1-based global step whose loss was `loss`; epoch: 0-based.
  NonFiniteLoss(double loss, int64_t step, int64_t epoch);
  /// What was not finite, e.g. "loss nan" or "gradients (loss 3.2e+30)".
  std::string what_was_not_finite() const;
  double loss() const { return loss_; }
  int64_t step() const { return step_; }
  int64_t epoch() const { return epoch_; }

 private:
  double loss_;
  int64_t step_, epoch_;
};

struct RunOptions {
  int64_t max_steps = 0;          // stop after this many optimizer steps in all; 0: no limit
  int64_t tokens_per_sample = 0;  // sequence length, for token/s in the summary; 0: not a sequence workload
  std::ostream* out = nullptr;    // where callbacks print; nullptr: std::cout
  std::optional<bool> tty = {};   // whether out is a terminal; default: isatty(1) for std::cout, else false
  std::string config = "{}";      // JSON object saved in checkpoints (kiln.config)
  OnNan on_nan = OnNan::stop;     // a step with a NaN or infinite loss: end the run, or skip the step
  // Gradient accumulation and data parallelism (SPECS X6, docs/distributed.md):
  // each optimizer step takes `accumulate` batches of the loader (fewer at an
  // epoch's end) through Task::accumulation_step, with the gradients summed
  // over the ranks of `distributed` when given. Progress counts optimizer
  // steps. With distributed, only rank 0 prints (out is discarded elsewhere).
  int64_t accumulate = 1;
  std::shared_ptr<DistributedHooks> distributed = nullptr;
  // Streams of the task's Rngs that each rank draws on its own under
  // `distributed` (dropout masks: rank r's examples get their own masks, not
  // rank 0's). During fit, rank r's stream seed is rank_stream_seed(seed, r)
  // (rank 0 keeps the seed); the draw counts stay the same on every rank (each
  // runs the same forwards), so rank 0's checkpoint, which holds the seed and
  // the count, resumes every rank's stream exactly. fit() puts the seeds back
  // when it returns.
  std::vector<std::string> rank_streams = {"dropout"};
};

// Sums over the steps of the epoch in progress.
struct EpochStats {
  int64_t steps = 0;
  int64_t count = 0;         // samples
  double loss_sum = 0;       // sum of loss * count
  int64_t correct = 0;
  int64_t classified = 0;    // samples of the steps that reported correct
  double last_loss = std::numeric_limits<double>::quiet_NaN();

  double loss() const;       // loss_sum / count (NaN before the first step)
  double accuracy() const;   // correct / classified (NaN when no step classified)
};

// logs() at the end of each completed epoch.
struct History {
  std::vector<std::map<std::string, double>> epochs;
  RunState state = RunState::idle;
};

class Trainer {
 public:
  Trainer(int64_t max_epochs, std::vector<std::shared_ptr<Callback>> callbacks = {}, RunOptions run = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Trains until max_epochs, max_steps or a stop. resume_from: a checkpoint
  /// written by checkpoint() for the same setup (task, loader, callbacks);
  /// everything is restored first, all or nothing, and training continues at
  /// the step after it. An exception from a step or callback ends the run as
  /// failed (on_train_end still runs) and propagates.
  History fit(Task& task, data::DataLoader& train, const std::string& resume_from = "");

  // ---- for callbacks, during fit ----
  Task& task() const;
  data::DataLoader& loader() const;
  /// epoch: 0-based epoch in progress; global_step: optimizer steps so far;
  /// step_in_epoch: steps of this epoch so far (optimizer steps: with
  /// RunOptions::accumulate = N each takes N of the loader's batches).
  const io::Progress& progress() const { return progress_; }
  int64_t max_epochs() const { return max_epochs_; }
  const RunOptions& run() const { return run_; }
  int64_t steps_per_epoch() const;
  int64_t batch_size() const;
  const EpochStats& epoch_stats() const { return epoch_; }
  /// 0 without RunOptions::distributed.
  int rank() const { return run_.distributed ? run_.distributed->rank() : 0; }
  int world_size() const { return run_.distributed ? run_.distributed->world_size() : 1; }
  /// Latest values by name: "loss" (last step, then the epoch mean at epoch
  /// end), "accuracy", "lr", and whatever callbacks add ("val/loss").
  std::map<std::string, double>& logs() { return logs_; }
  const std::map<std::string, double>& logs() const { return logs_; }
  const std::vector<std::shared_ptr<Callback>>& callbacks() const { return callbacks_; }
  RunState state() const { return state_; }
  /// Ends training after the current step (after this epoch's end hooks when
  /// called from on_epoch_end).
  void request_stop();
  bool stop_requested() const { return stop_; }
  /// Steps skipped for a non-finite loss (OnNan::skip) since fit() began.
  int64_t skipped_steps() const { return skipped_steps_; }

  /// Training seconds since fit() began and since this epoch began, without
  /// the time spent under pause_clock() (validation, a paused run).
  double elapsed() const;
  double epoch_elapsed() const;
  class ClockPause;
  [[nodiscard]] ClockPause pause_clock();

  std::ostream& out() const { return *out_; }
  bool tty() const { return tty_; }
  /// The epoch number and count the progress bar shows: (epoch + 1,
  /// max_epochs) unless a PhaseCallback sets phase-relative ones.
  void set_epoch_label(int64_t number, int64_t count);
  std::pair<int64_t, int64_t> epoch_label() const;

  /// A checkpoint of the whole run: the task's objects, progress, the loader
  /// ("data"), the epoch sums ("trainer"), every callback's objects and
  /// run().config. Save it, or load it (what fit(..., resume_from) does).
  io::Checkpoint checkpoint();

  /// The live-control handle (T14), safe to use from any thread, also after
  /// fit() returns.
  std::shared_ptr<Control> control() const { return control_; }

 private:
  friend class Control;  // sets state_ (paused, stopping)
  void step_once(const data::Batch& batch);
  void step_once(std::span<const data::Batch> micro_batches);  // accumulation / distributed
  void count_step(const StepResult& r);
  void end_epoch(History& history);
  void fail();  // after an exception: on_train_end for every callback, control ended
  void pause_clock_begin();
  void pause_clock_end();

  int64_t max_epochs_;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  RunOptions run_;
  std::ostream* out_;
  bool tty_;
  std::shared_ptr<Control> control_;

  Task* task_ = nullptr;
  data::DataLoader* loader_ = nullptr;
  io::Progress progress_;
  EpochStats epoch_;
  std::map<std::string, double> logs_;
  RunState state_ = RunState::idle;
  bool stop_ = false;
  int64_t skipped_steps_ = 0;
  std::optional<std::pair<int64_t, int64_t>> epoch_label_;

  double fit_start_ = 0, epoch_start_ = 0;  // steady-clock seconds
  double paused_total_ = 0, epoch_paused_ = 0, pause_start_ = 0;
  int pause_depth_ = 0;
};

// Stops the training clocks while alive (nestable).
class Trainer::ClockPause {
 public:
  explicit ClockPause(Trainer& t) : t_(&t) { t_->pause_clock_begin(); }
  ~ClockPause() {
    if (t_) t_->pause_clock_end();
  }
  ClockPause(ClockPause&& o) noexcept : t_(o.t_) { o.t_ = nullptr; }
  ClockPause(const ClockPause&) = delete;
  ClockPause& operator=(const ClockPause&) = delete;
  ClockPause& operator=(ClockPause&&) = delete;

 private:
  Trainer* t_;
};

inline Trainer::ClockPause Trainer::pause_clock() { return ClockPause(*this); }

}  // namespace kiln::train
