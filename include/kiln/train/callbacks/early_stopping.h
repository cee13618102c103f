// EarlyStopping (T9, Keras' EarlyStopping, spec 002 oa::CbEarlyStop): stops
// training once a monitored value has not improved for `patience` epochs:
//
//   epoch 7: early stopping (val/loss did not improve for 3 epochs, best 0.3486 at epoch 4)
//
//   std::make_shared<train::EarlyStopping>(train::EarlyStoppingOptions{.monitor = "val/loss", .patience = 3})
//
// It reads trainer.logs()[monitor] at each epoch end: "loss" and "accuracy"
// (the epoch's training means) are always there, "val/loss" once a Validation
// callback registered before it has run. Pair it with a CheckpointCallback
// (restore_best) to end with the best weights (Keras' restore_best_weights).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "kiln/io/checkpoint.h"
#include "kiln/io/checkpoint_manager.h"
#include "kiln/train/callback.h"

namespace kiln::train {

struct EarlyStoppingOptions {
  std::string monitor = "val/loss";        // a key of trainer.logs()
  int64_t patience = 3;                    // epochs without improvement tolerated (>= 0)
  double min_delta = 0;                    // an improvement beats the best by more than this (>= 0)
  io::MetricMode mode = io::MetricMode::min;  // min: lower is better (a loss); max: higher (an accuracy)
  std::optional<double> baseline = std::nullopt;  // the patience counter restarts only on values better than this
};

class EarlyStopping : public Callback, public io::Stateful {
 public:
  explicit EarlyStopping(EarlyStoppingOptions options = {});

  /// A run that starts at step 0 starts afresh (best, wait reset); a resumed
  /// one keeps what its checkpoint restored.
  void on_train_begin(Trainer& trainer) override;
  /// Throws a kiln::Error naming the monitor and the keys present when logs()
  /// lacks the monitor.
  void on_epoch_end(Trainer& trainer) override;
  /// best, best_epoch, wait, stopped_epoch under "early_stopping".
  void checkpoint_objects(io::Checkpoint& ckpt) override;

  /// The best value seen (+inf in min mode, -inf in max mode before any).
  double best() const { return best_; }
  /// The 1-based epoch of best(); 0: none yet.
  int64_t best_epoch() const { return best_epoch_; }
  /// Epochs since the last improvement.
  int64_t wait() const { return wait_; }
  /// The 1-based epoch at which it stopped training; 0: it has not.
  int64_t stopped_epoch() const { return stopped_epoch_; }
  const EarlyStoppingOptions& options() const { return options_; }

  io::State state() const override;
  void load_state(const io::State& state) override;

 private:
  void reset();
  bool improves(double value, double reference) const;

  EarlyStoppingOptions options_;
  double best_ = 0;
  int64_t best_epoch_ = 0;
  int64_t wait_ = 0;
  int64_t stopped_epoch_ = 0;
};

}  // namespace kiln::train
