// Task (T1, spec 000 "Training utilities"): what one training or validation
// step does to a model. The Trainer calls training_step once per batch; the
// step owns its update (forward, backward, optimizer step) and reports what it
// measured, so the Trainer never differentiates again.
//
//   auto model = nn::make<Mlp>(rngs);
//   optim::Adam opt(model->parameters(), {.lr = 1e-3});
//   train::Task task(model, opt, &rngs);        // classification by default
//
//   struct Forecast : train::Task {             // or override the steps
//     using Task::Task;
//     train::StepResult training_step(const data::Batch& b) override {
//       return train::regression_step(forward(), optimizer(), b);
//     }
//   };
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>

#include "kiln/core/rngs.h"
#include "kiln/core/tensor.h"
#include "kiln/data/dataset.h"
#include "kiln/nn/module.h"

namespace kiln::io {
class Checkpoint;
}
namespace kiln::optim {
class Optimizer;
}

namespace kiln::train {

// What a step measured. loss is the batch mean; count the samples it covers
// (the weight of loss in epoch means); correct the correctly classified ones,
// or -1 when the step does not classify (then no accuracy is shown); applied
// false when the step did not apply its update because a gradient was NaN or
// infinite (train::update), which the Trainer treats as a non-finite loss.
struct StepResult {
  double loss = std::numeric_limits<double>::quiet_NaN();
  int64_t count = 0;
  int64_t correct = -1;
  bool applied = true;
};

// A micro-batch's loss for gradient accumulation and data parallelism
// (train::accumulation_step): the SUM of the per-item losses (a 0-dim tensor
// on the tape), not their mean, so that the step can divide by the number of
// valid items of the whole step (every micro-batch of every rank).
struct LossSum {
  Tensor sum;
  int64_t correct = -1;  // correctly classified items, or -1
};

class DistributedHooks;

// The model's forward pass, input -> output.
using Forward = std::function<Tensor(const Tensor&)>;

class Task {
 public:
  /// A model called as model(x) (nn::make<M>(...)).
  template <nn::ModuleType M>
  Task(nn::Shared<M> model, optim::Optimizer& optimizer, Rngs* rngs = nullptr)
      : Task(*model, [model](const Tensor& x) -> Tensor { return model(x); }, optimizer, rngs) {}
  /// Any module with its forward pass given separately.
  Task(nn::Module& model, Forward forward, optim::Optimizer& optimizer, Rngs* rngs = nullptr);
  virtual ~Task() = default;
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;

  /// One optimizer step on a batch. Default: classification_step (cross
  /// entropy of logits [B, C] against class indices [B]).
  virtual StepResult training_step(const data::Batch& batch);
  /// Loss (and correct count) on a batch without updating anything; called
  /// with the model in eval mode under NoGradGuard. Default: classification_eval.
  virtual StepResult validation_step(const data::Batch& batch);
  /// One optimizer step over `micro_batches` (RunOptions::accumulate of them,
  /// fewer at an epoch's end), their gradients summed over the ranks of
  /// `distributed` when given. Default: train::accumulation_step, built on
  /// valid_count, loss_sum and clip_gradients below.
  virtual StepResult accumulation_step(std::span<const data::Batch> micro_batches, DistributedHooks* distributed);
  /// The items of a micro-batch its loss counts (known before the forward).
  /// Default: batch.size(); a masked loss returns its valid positions.
  virtual int64_t valid_count(const data::Batch& batch);
  /// The micro-batch's summed loss. Default: cross entropy (reduction Sum) of
  /// forward(input) [B, C] against target [B], with the correct count.
  virtual LossSum loss_sum(const data::Batch& batch);
  /// Between the (summed) gradients and the optimizer step: false skips the
  /// step (non-finite gradients). Default: train::grads_finite; a task that
  /// clips gradients does it here.
  virtual bool prepare_step();
  /// Entering phase `name` (PhaseCallback): swap losses, freeze parts, ... Default: nothing.
  virtual void set_phase(const std::string& name) {}
  /// Live control's RequestRecapture: a task with a compiled step
  /// (CompiledTask) drops its recordings and says so; others reject it (throw).
  virtual std::string recapture();
  /// Registers what a checkpoint of this task holds. Default: the model, the
  /// optimizer and the Rngs when given.
  virtual void checkpoint_objects(io::Checkpoint& ckpt);

  nn::Module& model() const { return *model_; }
  const Forward& forward() const { return forward_; }
  optim::Optimizer& optimizer() const { return *optimizer_; }
  Rngs* rngs() const { return rngs_; }

 private:
  nn::Module* model_;
  Forward forward_;
  optim::Optimizer* optimizer_;
  Rngs* rngs_;
};

}  // namespace kiln::train
