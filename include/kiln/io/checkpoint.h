// Checkpoints: one safetensors file holding everything a training run needs to
// continue exactly where it stopped (I2, I3): the model's parameters and
// buffers, the optimizer's state, and in "__metadata__" the scheduler, every
// random stream, the training progress, the data order and callback state, the
// model config and a CRC32C per tensor. Byte-level format: docs/checkpoints.md.
//
//   io::Progress progress;
//   io::Checkpoint ckpt;
//   ckpt.model(model).optimizer(opt).scheduler(sched).rngs(rngs).progress(progress)
//       .state("data", loader);
//   ckpt.save("run/last.safetensors");   // atomic: the old file or the new one, never a broken one
//   ckpt.load("run/last.safetensors");   // validates everything, then restores everything
//
// A Checkpoint holds references to the objects it was given: it must not
// outlive them. The file's tensors are the model's under their own dotted
// names (so any safetensors tool reads the weights) and the optimizer's under
// "optim." (the optimizer's prefix).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/rngs.h"
#include "kiln/core/stateful.h"
#include "kiln/nn/module.h"

namespace kiln::optim {
class Optimizer;
class LRScheduler;
}  // namespace kiln::optim

namespace kiln::io {

/// Where a training run is; the Trainer's counters.
struct Progress {
  int64_t epoch = 0;          // the epoch in progress, 0-based
  int64_t global_step = 0;    // optimizer steps since the start of training
  int64_t step_in_epoch = 0;  // optimizer steps done within `epoch`
  friend bool operator==(const Progress&, const Progress&) = default;
};

// The objects a checkpoint carries besides models and optimizers: State,
// Stateful and the typed reads live in core (kiln/core/stateful.h) so that
// data's loader is checkpointable without seeing io; io's names for them
// stay valid.
using kiln::State;
using kiln::Stateful;
using kiln::state_f64;
using kiln::state_i64;
using kiln::state_u64;

class Checkpoint {
 public:
  Checkpoint();
  ~Checkpoint();
  Checkpoint(Checkpoint&&) noexcept;
  Checkpoint& operator=(Checkpoint&&) noexcept;

  // ---- what the checkpoint holds; each name is unique within its kind ----
  /// The module's state dict (parameters, persistent buffers) under
  /// "<prefix>.<path>", or "<path>" for the default empty prefix; and the
  /// generators its modules own (Dropout's). Two models (a GAN) take two prefixes.
  Checkpoint& model(nn::Module& module, std::string prefix = "");
  /// The optimizer's state dict under "<prefix>.<key>": "optim.step",
  /// "optim.fc1.weight.exp_avg", "optim.param_groups.0.lr".
  Checkpoint& optimizer(optim::Optimizer& opt, std::string prefix = "optim");
  Checkpoint& scheduler(optim::LRScheduler& sched, std::string name = "scheduler");
  Checkpoint& rngs(Rngs& rngs, std::string name = "rngs");
  Checkpoint& progress(Progress& progress);
  /// Any other state (the data order, a callback), under `name`.
  Checkpoint& state(std::string name, Stateful& object);
  /// The same with two functions instead of a Stateful object.
  Checkpoint& state(std::string name, std::function<State()> get, std::function<void(const State&)> set);
  /// The model's configuration as JSON text, written into the file so the
  /// model can be rebuilt from it (read it back with read_checkpoint_info).
  Checkpoint& config(std::string json);

  // ---- files ----
  /// Writes everything to `path` atomically (temporary file, fsync, rename,
  /// fsync of the folder): a crash at any moment leaves the previous file or
  /// the new one.
  void save(const std::string& path) const;
  /// Reads `path` and restores every registered object. Everything is checked
  /// first: the file (header, byte ranges, checksums), then each object
  /// against its part (names, shapes, dtypes, option values). On any error a
  /// kiln::Error names the file, the part and the problem, and no object has
  /// changed. A plain safetensors file of weights (from any tool) loads into a
  /// checkpoint that holds only models.
  void load(const std::string& path);

 private:
  struct Parts;
  std::unique_ptr<Parts> parts_;
};

/// What a checkpoint file holds, read without building anything: validated
/// like a load (header and checksums), tensor data not kept.
struct CheckpointInfo {
  int64_t format_version = 0;  // 0: a plain safetensors file, not written by kiln
  std::string config;          // the config() JSON, empty when none
  Progress progress;
  std::vector<std::string> models, optimizers;  // prefixes
  std::map<std::string, std::string> metadata;  // the raw "__metadata__"
  struct TensorInfo {
    std::string name, dtype;  // dtype as in the file: "F32", ...
    Shape shape;
  };
  std::vector<TensorInfo> tensors;  // in file order
};
CheckpointInfo read_checkpoint_info(const std::string& path);

}  // namespace kiln::io
