#include "kiln/train/task.h"

#include "kiln/io/checkpoint.h"
#include "kiln/ops/loss.h"
#include "kiln/train/metrics.h"
#include "kiln/train/steps.h"

namespace kiln::train {

std::string Task::recapture() {
  KILN_FAIL("request_recapture", "this run has no compiled step (start it with --compile)");
}

Task::Task(nn::Module& model, Forward forward, optim::Optimizer& optimizer, Rngs* rngs)
    : model_(&model), forward_(std::move(forward)), optimizer_(&optimizer), rngs_(rngs) {}

StepResult Task::training_step(const data::Batch& batch) { return classification_step(forward_, *optimizer_, batch); }

StepResult Task::validation_step(const data::Batch& batch) { return classification_eval(forward_, batch); }

StepResult Task::accumulation_step(std::span<const data::Batch> micro_batches, DistributedHooks* distributed) {
  return train::accumulation_step(*this, micro_batches, distributed);
}

int64_t Task::valid_count(const data::Batch& batch) { return batch.size(); }

LossSum Task::loss_sum(const data::Batch& batch) {
  Tensor logits = forward_(batch.input);  // [B, C]
  Tensor sum = cross_entropy(logits, batch.target, {.reduction = Reduction::Sum});
  return {sum, count_correct(logits.detach(), batch.target)};
}

bool Task::prepare_step() { return grads_finite(*optimizer_); }

void Task::checkpoint_objects(io::Checkpoint& ckpt) {
  ckpt.model(*model_).optimizer(*optimizer_);
  if (rngs_) ckpt.rngs(*rngs_);
}

}  // namespace kiln::train
