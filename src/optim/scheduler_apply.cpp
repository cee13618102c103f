// How a schedule reaches an optimizer: lr through Optimizer::apply_lr (times
// each group's lr_scale), cycled momentum into "momentum" or "beta1". Kept in
// its own file so that schedules alone link without the optimizers.
#include "kiln/core/error.h"
#include "kiln/optim/optimizer.h"
#include "kiln/optim/scheduler.h"
#include "kiln/optim/schedulers.h"

namespace kiln::optim {

void LRScheduler::apply(Optimizer& opt) const {
  const double lr_now = get_lr();
  const std::optional<double> m = momentum(last_step_);
  if (m) {
    // PyTorch's OneCycleLR/CyclicLR write "momentum" (SGD) or betas[0] (Adam).
    const char* option = opt.has_option("momentum") ? "momentum" : opt.has_option("beta1") ? "beta1" : nullptr;
    KILN_CHECK(option != nullptr, name(),
               "apply: this schedule cycles momentum but {} has neither a 'momentum' nor a 'beta1' option "
               "(construct the scheduler with cycle_momentum = false)",
               opt.name());
    opt.set(option, *m);  // validated by the optimizer before anything changes
  }
  opt.apply_lr(lr_now);
}

double LRScheduler::step(Optimizer& opt) {
  const double lr_now = step();
  apply(opt);
  return lr_now;
}

double ReduceOnPlateauScheduler::step(double metric, Optimizer& opt) {
  const double lr_now = step(metric);
  apply(opt);
  return lr_now;
}

}  // namespace kiln::optim
