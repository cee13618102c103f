// Validation (T8, spec 002 oa::CbValidation): evaluates the task on a whole
// epoch of a validation loader after every training epoch (and every N steps
// when asked), with the model in eval mode and no autograd, and writes the
// sample-weighted mean loss (and accuracy) into trainer.logs() for the
// callbacks after it. Its time is excluded from the training throughput and
// printed on its own line:
//
//   validation: loss 0.3486 · accuracy 0.8765 · 0.41s
//
//   auto val = std::make_shared<data::DataLoader>(test_set, data::DataLoaderOptions{.shuffle = false});
//   train::Trainer trainer(10, {std::make_shared<train::Validation>(val),          // writes "val/loss"
//                               std::make_shared<train::ProgressBar>(),            // shows it
//                               std::make_shared<train::EarlyStopping>(),          // reads it
//                               std::make_shared<train::CheckpointCallback>("runs/x")});
//
// Under data parallelism (docs/distributed.md) the loader may be sharded
// like the training loader (DataLoaderOptions{.rank, .world_size} = the
// Trainer's): each rank evaluates its slice of every batch and the sums
// (loss x count, count, correct) are all-reduced, so every rank logs the
// whole set's loss and accuracy, what one process would (the loss up to the
// order of the additions, the accuracy exactly). An unsharded loader is
// evaluated whole on every rank.
//
// Register it before the callbacks that read "val/loss" (the progress bar,
// the CSV logger, early stopping, checkpoints): the Trainer runs callbacks in
// registration order. docs/checkpoint_callbacks.md.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "kiln/io/checkpoint.h"
#include "kiln/train/callback.h"

namespace kiln::data {
class DataLoader;
}

namespace kiln::train {

struct ValidationOptions {
  int64_t every_n_steps = 0;    // also evaluate every N optimizer steps; 0: only at epoch ends
  std::string prefix = "val/";  // logs keys: "<prefix>loss", "<prefix>accuracy"
};

// One evaluation: the whole validation epoch.
struct ValidationResult {
  double loss = std::numeric_limits<double>::quiet_NaN();  // sample-weighted mean of the steps' losses
  double accuracy =
      std::numeric_limits<double>::quiet_NaN();  // correct / samples of the steps reporting it; NaN: none did
  int64_t count = 0;                             // samples evaluated
  double seconds = 0;                            // wall time of the evaluation
  int64_t global_step = -1;                      // the training step it evaluated; -1: none yet
};

class Validation : public Callback, public io::Stateful {
 public:
  /// `loader` should be deterministic (shuffle = false): every evaluation runs
  /// one whole epoch of it.
  explicit Validation(std::shared_ptr<data::DataLoader> loader, ValidationOptions options = {});

  /// A fresh run (step 0) forgets the last result; a resumed one writes the
  /// restored result back into trainer.logs().
  void on_train_begin(Trainer& trainer) override;
  void on_step_end(Trainer& trainer, const StepResult& step) override;
  void on_epoch_end(Trainer& trainer) override;
  /// Evaluates once more when the model has trained since the last evaluation
  /// and the run did not fail: a step-only run (max_steps before an epoch
  /// ends) or one stopped mid-epoch.
  void on_train_end(Trainer& trainer) override;
  /// The last result under "validation:<prefix>" (e.g. "validation:val/") and
  /// the validation loader's order under "validation:<prefix>data", so a
  /// resumed run evaluates the same batches in the same order.
  void checkpoint_objects(io::Checkpoint& ckpt) override;
  /// Live control: evaluates now; always applied.
  bool evaluate_now(Trainer& trainer) override;

  /// Runs one evaluation now: the whole epoch, logs, printed line.
  const ValidationResult& evaluate(Trainer& trainer);

  /// The last evaluation (also after a resume); global_step -1 before any.
  const ValidationResult& result() const { return result_; }
  /// The last validation loss (NaN before any evaluation).
  double metric() const { return result_.loss; }
  const ValidationOptions& options() const { return options_; }
  data::DataLoader& loader() const { return *loader_; }

  /// io::Stateful: the last result.
  io::State state() const override;
  void load_state(const io::State& state) override;

 private:
  void write_logs(Trainer& trainer) const;
  // Whether the loader is one rank's shard (its world_size > 1): then the
  // sums are all-reduced over the Trainer's ranks (an error when the
  // Trainer's rank and world size differ from the loader's).
  bool sharded(const Trainer& trainer) const;  // result_ -> logs()["<prefix>loss"], ["<prefix>accuracy"]

  std::shared_ptr<data::DataLoader> loader_;
  ValidationOptions options_;
  std::string loss_key_, accuracy_key_, label_;
  ValidationResult result_;
};

}  // namespace kiln::train
