// CheckpointManager: a folder of rotating checkpoints (Keras' ModelCheckpoint,
// orbax's CheckpointManager): keeps the newest few, and the best by a
// monitored metric, and finds them again in a new process. docs/checkpoints.md, "CheckpointManager".
//
//   io::CheckpointManager manager("runs/mnist", {.keep_last = 3, .monitor = "val/loss"});
//   manager.restore_latest(ckpt);                  // --resume: false when the folder is empty
//   ...
//   manager.save(ckpt, progress.global_step, val_loss);   // runs/mnist/step-<n>.safetensors
//   ...
//   manager.restore_best(ckpt);                    // the best weights at the end
//
// The folder holds the checkpoints, step-<step>.safetensors, and the manager's
// record of them, checkpoints.json (the order they were saved in, their
// metrics, the best). Every file is written atomically, and old checkpoints are
// deleted only after the new one and the record are on disk, so a crash at any
// moment loses nothing that was saved: opening the folder again reconciles the
// record with the files there. Not thread-safe; one manager per folder.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "kiln/io/checkpoint.h"

namespace kiln::io {

/// Whether a lower (a loss) or a higher (an accuracy) metric is better.
enum class MetricMode { min, max };

/// Keras' improvement rule, shared by the manager and the callbacks that
/// monitor a metric: min mode `value + min_delta < best`, max mode
/// `value - min_delta > best`; a tie is no improvement, NaN never is.
inline bool improves(double value, double best, MetricMode mode, double min_delta) {
  return mode == MetricMode::min ? value + min_delta < best : value - min_delta > best;
}
/// The best before any value: +inf in min mode, -inf in max mode.
inline double worst_metric(MetricMode mode) {
  return mode == MetricMode::min ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
}

struct CheckpointManagerOptions {
  int64_t keep_last = 3;              // the newest checkpoints kept (>= 1)
  bool keep_best = true;              // also keep the best by the metric, however old
  std::string monitor = "val/loss";   // the metric's name: recorded, and checked on reopening
  MetricMode mode = MetricMode::min;  // lower is better (min) or higher (max)
  double min_delta = 0.0;             // an improvement must beat the best by more than this (>= 0)
};

class CheckpointManager {
 public:
  /// One checkpoint of the folder.
  struct Entry {
    int64_t step = 0;
    std::string path;              // <dir>/step-<step>.safetensors
    std::optional<double> metric;  // none when save() was given none (or the file was adopted)
  };

  /// Opens `dir`, creating it if needed, and reconciles its record with the
  /// files there: checkpoints missing from the record are validated
  /// (read_checkpoint_info) and adopted, or skipped when broken; recorded ones
  /// that are gone are dropped; temporaries of killed saves are removed. What
  /// it found is in problems(). Opening deletes no checkpoint. Throws when the
  /// folder cannot be created or written, an option is invalid, or the record
  /// was made with another monitor or mode.
  explicit CheckpointManager(std::string dir, CheckpointManagerOptions options = {});

  /// Saves `ckpt` as <dir>/step-<step>.safetensors, records it (with `metric`
  /// when given), then deletes the checkpoints that fall out of keep_last
  /// (never the best one when keep_best). Saving a step again replaces its
  /// file and metric (a run resumed from an earlier checkpoint). Returns the
  /// path. A NaN metric is recorded but never the best.
  std::string save(const Checkpoint& ckpt, int64_t step, std::optional<double> metric = std::nullopt);

  /// The most recently saved checkpoint's path (the highest step, unless a
  /// run resumed from an earlier one has saved since); none when empty.
  std::optional<std::string> latest() const;
  /// The best checkpoint's path; none before any metric, or when the best one
  /// was deleted (keep_best = false) or is gone from the folder.
  std::optional<std::string> best() const;
  /// The best metric seen so far (even when its checkpoint was not kept).
  std::optional<double> best_metric() const;
  /// Whether `metric` improves on best_metric() by more than min_delta (like
  /// Keras: a tie is no improvement, NaN never is; the first non-NaN metric is,
  /// unless it is +inf in min mode or -inf in max mode).
  bool is_better(double metric) const;

  /// The checkpoints in the folder, in step order.
  std::vector<Entry> entries() const;

  /// Loads latest() / best() into `ckpt` (Checkpoint::load: all or nothing);
  /// false, touching nothing, when there is none.
  bool restore_latest(Checkpoint& ckpt) const;
  bool restore_best(Checkpoint& ckpt) const;

  /// What opening the folder found out of order and did about it, one line
  /// each: checkpoints adopted, broken files skipped, missing files dropped,
  /// an unreadable record rebuilt, stale temporaries removed.
  const std::vector<std::string>& problems() const { return problems_; }

  const std::string& dir() const { return dir_; }
  const CheckpointManagerOptions& options() const { return options_; }

  /// "step-<step>.safetensors", the file name of a step's checkpoint.
  static std::string file_name(int64_t step);
  /// "checkpoints.json", the manager's record in the folder.
  static constexpr const char* kIndexName = "checkpoints.json";

 private:
  struct Record {
    int64_t step;
    std::optional<double> metric;
  };
  struct Best {
    int64_t step;
    double metric;
  };

  std::string path_of(int64_t step) const;
  void open_folder();
  void write_index() const;
  void recompute_best();

  std::string dir_;
  CheckpointManagerOptions options_;
  std::vector<Record> saved_;  // the folder's checkpoints, oldest save first
  std::optional<Best> best_;   // the best metric seen, and its step
  std::vector<std::string> problems_;
};

}  // namespace kiln::io
