// A compiled training step (SPECS A4, spec 002's compiled training program;
// docs/compile.md): record a step once, replay it.
//
//   train::CompiledStep step([&](const std::vector<Tensor>& in) {
//     Tensor loss = cross_entropy(model.forward(in[0]), in[1]);
//     loss.backward();
//     opt.step();
//     opt.zero_grad();
//     return std::vector<Tensor>{loss};
//   }, {.modules = {&model}});
//   for (auto& batch : loader) {
//     sched.apply(opt);                                   // read at replay: never baked in
//     double loss = step({batch.input, batch.target})[0].item<double>();
//   }
//
// The first call with a signature (each input's shape and dtype, grad mode,
// each module's train/eval mode and which of its parameters hold a gradient)
// runs the step eagerly while recording its kernel launches (NOTE [Recorded
// launches] in kiln/core/replay.h); later calls with that signature copy the
// inputs into the recorded input buffers and replay the launches: no
// argument checks, no allocation, no tape. Values that change between steps
// are read at replay from the live objects: the optimizer's learning rate,
// betas and step count (its update is one launch that runs again), the
// generators of dropout and other random ops (given through `modules` or
// `generators`). A new signature records again (a small cache).
//
// A step the recorder cannot replay (a host read such as item() inside it,
// an op without a replay rule, a random op on a generator it was not given)
// is rejected by name: that call's results are eager's, and the signature
// keeps running eagerly. evidence() says what each pass did.
//
// Outputs are the recorded buffers (detached): the next call overwrites
// them, as CUDA graphs' static outputs; clone() to keep one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/train/task.h"

namespace kiln {
class Generator;
}  // namespace kiln

namespace kiln::train {

/// Spec 002's pass outcomes (Rejected is its Failed: the recording is not replayed).
enum class PassStatus { NotRun, Inherited, Analyzed, Applied, Rejected };
const char* to_string(PassStatus s);

/// One pass of capture evidence: stage -> status, with the reason.
struct PassReport {
  std::string stage;  // SemanticValidation, ReplaySafety, DeadOpRemoval, Fusion, MemoryPlanning, KernelSelection, CommandRecording
  PassStatus status = PassStatus::NotRun;
  std::string detail;
};

/// What happened to one recording, pass by pass, in order.
struct CaptureEvidence {
  std::vector<PassReport> passes;
  bool replayable = false;
  int64_t launches = 0;          // kernel launches recorded
  int64_t host_effects = 0;      // gradient assignments recorded
  int64_t buffers = 0;           // storages the recording holds
  int64_t buffer_bytes = 0;      // their bytes (the recording's memory)
  const PassReport* find(const std::string& stage) const;
  /// One line per pass: "  ReplaySafety          Rejected   op 'item' ...".
  std::string str() const;
};

struct CompileOptions {
  /// Modules the step runs: their train/eval mode and which parameters hold a
  /// gradient enter the signature, and their generators (Dropout's) may be
  /// drawn from at replay.
  std::vector<nn::Module*> modules = {};
  /// Other generators the step draws from (they must outlive the CompiledStep).
  std::vector<Generator*> generators = {};
  /// Recordings kept (one per signature); the oldest is dropped beyond.
  size_t max_recordings = 8;
  /// Print the evidence to stderr when a signature is recorded or rejected.
  bool print_evidence = false;
  /// Run the Fusion pass (docs/compile.md); false: NotRun (A/B measurements).
  bool fusion = true;
};

class CompiledStep {
 public:
  using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;
  enum class Mode { Recorded, Replayed, Eager };

  explicit CompiledStep(Fn fn, CompileOptions options = {});
  ~CompiledStep();
  CompiledStep(CompiledStep&&) noexcept;
  CompiledStep& operator=(CompiledStep&&) noexcept;

  /// Runs the step on `inputs` (recording, replaying, or eagerly; see above).
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs);

  /// How the last call ran.
  Mode last_mode() const;
  int64_t recordings() const;   // recordings made (rejected ones included)
  int64_t replays() const;
  int64_t eager_calls() const;  // calls that ran eagerly on a rejected signature
  /// Evidence of the last recording (empty before the first call).
  const CaptureEvidence& evidence() const;

  /// Drops every recording: the next call of each signature records again
  /// (live control's Recapture class; RequestRecapture).
  void request_recapture();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// train::update (steps.h) in a form a compiled step can replay: backward,
/// then one launch that applies the optimizer step only when the loss and
/// every gradient are finite, then zero_grad. Returns whether it applied as
/// a 0-dim bool tensor, refilled by each replay (a host bool would be fixed
/// at recording). Parameters and optimizer state end as update() leaves them;
/// unlike update(), the backward runs even for a non-finite loss.
Tensor update_guarded(const Tensor& loss, optim::Optimizer& opt);

/// A classification Task (Task's default: cross entropy of logits [B, C]
/// against class indices [B]) whose training_step is a CompiledStep over the
/// forward, the loss and update_guarded: the StepResult classification_step
/// gives (loss, count, correct before the update, applied), bit for bit.
/// Validation steps run eagerly. `kiln train fashion-mnist --compile`.
class CompiledTask : public Task {
 public:
  template <nn::ModuleType M>
  CompiledTask(nn::Shared<M> model, optim::Optimizer& optimizer, Rngs* rngs = nullptr, CompileOptions options = {})
      : Task(model, optimizer, rngs) {
    init(std::move(options));
  }
  StepResult training_step(const data::Batch& batch) override;
  /// Drops the recordings (RequestRecapture): the next step records again.
  std::string recapture() override;
  CompiledStep& compiled() { return *step_; }

 private:
  void init(CompileOptions options);
  std::unique_ptr<CompiledStep> step_;
};

}  // namespace kiln::train
