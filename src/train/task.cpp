#include "kiln/train/task.h"

#include "kiln/io/checkpoint.h"
#include "kiln/train/steps.h"

namespace kiln::train {

std::string Task::recapture() {
  KILN_FAIL("request_recapture", "this run has no compiled step (start it with --compile)");
}

Task::Task(nn::Module& model, Forward forward, optim::Optimizer& optimizer, Rngs* rngs)
    : model_(&model), forward_(std::move(forward)), optimizer_(&optimizer), rngs_(rngs) {}

StepResult Task::training_step(const data::Batch& batch) { return classification_step(forward_, *optimizer_, batch); }

StepResult Task::validation_step(const data::Batch& batch) { return classification_eval(forward_, batch); }

void Task::checkpoint_objects(io::Checkpoint& ckpt) {
  ckpt.model(*model_).optimizer(*optimizer_);
  if (rngs_) ckpt.rngs(*rngs_);
}

}  // namespace kiln::train
