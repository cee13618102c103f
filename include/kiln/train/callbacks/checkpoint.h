// CheckpointCallback (T10, spec 002 oa::CbCheckpoint) and ModelCheckpoint
// (T11, Keras' ModelCheckpoint(save_best_only=True)).
//
// CheckpointCallback keeps a folder of resumable checkpoints of the whole run
// (trainer.checkpoint(): model, optimizer, progress, data order, every
// callback's state) through an io::CheckpointManager: one at every epoch end
// (ranked by the monitored value), optionally one every N optimizer steps,
// the newest keep_last and the best kept. It prints, at each epoch end,
//
//   epoch 3: val_loss improved from 0.4056 to 0.3486 — saving model
//   epoch 4: val_loss did not improve from 0.3486
//
// and at train end, when the best checkpoint is not the current model, loads
// its weights and optimizer back: `restored best weights from epoch 3 (val_loss 0.3486)`.
// Without the monitor in logs() the epoch's training loss ranks them, named
// as the loss function (spec 002: `epoch 3: cross_entropy improved from ...`)
// when the options give loss_name; the name that ranked the checkpoints is
// recorded in the callback's state, so a resumed run prints it too.
//
//   auto ckpt = std::make_shared<train::CheckpointCallback>("runs/fmnist");
//   train::Trainer trainer(10, {validation, progress_bar, early_stopping, ckpt});   // ckpt last
//   trainer.fit(task, loader, ckpt->latest());   // resumes when the folder has a checkpoint
//
// Register it AFTER Validation and EarlyStopping (last): the Trainer runs
// callbacks in order, and the epoch's checkpoint must hold their state at the
// end of that epoch (Validation's "val/loss", EarlyStopping's patience
// counter, a CsvLogger's length). docs/checkpoint_callbacks.md.
//
// ModelCheckpoint keeps only the best model's weights, as one safetensors
// file (loadable with io::Checkpoint().model(m).load(path) or any
// safetensors reader), replaced atomically whenever the monitor improves.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "kiln/io/checkpoint.h"
#include "kiln/io/checkpoint_manager.h"
#include "kiln/train/callback.h"

namespace kiln::train {

struct CheckpointCallbackOptions {
  std::string monitor = "val/loss";           // ranks the epoch checkpoints; when absent from logs(): "loss"
  io::MetricMode mode = io::MetricMode::min;  // min: lower is better; max: higher is better
  double min_delta = 0;                       // an improvement beats the best by more than this (>= 0)
  int64_t keep_last = 3;                      // the newest checkpoints kept (>= 1), besides the best
  int64_t every_n_steps = 0;                  // also save every N optimizer steps (unranked); 0: epoch ends only
  bool restore_best = true;                   // load the best weights back at train end
  /// The training loss's name in the printed lines when it ranks the
  /// checkpoints (monitor absent from logs()): the loss function, e.g.
  /// "cross_entropy", as spec 002 prints it. Non-empty, no spaces.
  std::string loss_name = "loss";
};

class CheckpointCallback : public Callback, public io::Stateful {
 public:
  /// Opens (or creates) the folder `dir` now, so a folder that cannot be
  /// written fails before training starts.
  explicit CheckpointCallback(std::string dir, CheckpointCallbackOptions options = {});

  /// Prints what opening the folder found out of order (manager problems()).
  void on_train_begin(Trainer& trainer) override;
  void on_step_end(Trainer& trainer, const StepResult& step) override;
  void on_epoch_end(Trainer& trainer) override;
  /// Unless the run failed: saves an unranked checkpoint when training went
  /// on after the last save (a run ended by max_steps or a stop mid-epoch),
  /// then restores the best weights (restore_best).
  void on_train_end(Trainer& trainer) override;
  /// best_epoch, best_step, last_epoch, ranked_by under "checkpoint".
  void checkpoint_objects(io::Checkpoint& ckpt) override;
  /// Live control: saves a checkpoint of the run now (unranked); always applied.
  bool save_now(Trainer& trainer) override;

  /// The newest checkpoint's path, "" when the folder has none: pass it to
  /// Trainer::fit to resume (fit treats "" as a fresh start).
  std::string latest() const;
  /// The best checkpoint's path, "" when none.
  std::string best() const;
  /// The 1-based epoch of the best checkpoint; 0: none yet.
  int64_t best_epoch() const { return best_epoch_; }
  /// The name of what ranked the checkpoints ("val_loss", or options().loss_name).
  const std::string& ranked_by() const { return ranked_by_; }
  const io::CheckpointManager& manager() const { return *manager_; }
  const CheckpointCallbackOptions& options() const { return options_; }

  io::State state() const override;
  void load_state(const io::State& state) override;

 private:
  std::string save(Trainer& trainer, std::optional<double> metric);

  CheckpointCallbackOptions options_;
  std::unique_ptr<io::CheckpointManager> manager_;
  std::string display_name_;     // monitor as Keras prints it: "val/loss" -> "val_loss"
  std::string ranked_by_;        // the name printed at the last epoch end: display_name_, or loss_name (fallback)
  int64_t best_epoch_ = 0;       // 1-based epoch of the best checkpoint; 0: none
  int64_t best_step_ = -1;       // its global step
  int64_t last_epoch_ = 0;       // 1-based epoch of the last epoch-end checkpoint
  int64_t last_saved_step_ = 0;  // the global step of this run's last save (or of the checkpoint resumed from)
};

struct ModelCheckpointOptions {
  std::string monitor = "val/loss";           // a key of trainer.logs()
  io::MetricMode mode = io::MetricMode::min;  // min: lower is better; max: higher is better
  double min_delta = 0;                       // an improvement beats the best by more than this (>= 0)
  bool verbose = true;                        // print a line at each epoch end
};

class ModelCheckpoint : public Callback, public io::Stateful {
 public:
  /// `path`: the weights file, e.g. "runs/best.safetensors" (its folder must exist).
  explicit ModelCheckpoint(std::string path, ModelCheckpointOptions options = {});

  /// A run that starts at step 0 starts afresh; a resumed one keeps the restored best.
  void on_train_begin(Trainer& trainer) override;
  /// Saves task().model() to path() when logs()[monitor] improves on the best;
  /// a kiln::Error naming the monitor and the keys present when it is missing.
  void on_epoch_end(Trainer& trainer) override;
  /// best, best_epoch under "model_checkpoint".
  void checkpoint_objects(io::Checkpoint& ckpt) override;

  const std::string& path() const { return path_; }
  /// The best value saved (+inf in min mode, -inf in max mode before any).
  double best() const { return best_; }
  /// The 1-based epoch of best(); 0: none yet.
  int64_t best_epoch() const { return best_epoch_; }

  io::State state() const override;
  void load_state(const io::State& state) override;

 private:
  void reset();

  std::string path_;
  ModelCheckpointOptions options_;
  std::string display_name_;
  double best_ = 0;
  int64_t best_epoch_ = 0;
};

/// The monitor as Keras prints it: "val/loss" -> "val_loss".
std::string metric_display_name(const std::string& monitor);

}  // namespace kiln::train
