// NoOp: an optimizer that updates nothing (O2; spec 002 "No-op optimizer"), for
// code that takes an Optimizer& (a Trainer, callbacks, schedulers) while the
// caller updates parameters by hand. step() only counts; zero_grad() clears
// the parameters it was given (none by default); "lr" is stored so schedulers
// can drive it and the hand-written update can read it (opt.lr()).
#pragma once

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct NoOpOptions {
  double lr = 0.0;

  template <class F>
  void visit(F&& f) {
    f("lr", lr);
  }
  void validate(const char* op) const;
};

class NoOp : public OptimizerWith<NoOpOptions> {
 public:
  explicit NoOp(nn::ParameterList params = {}, const NoOpOptions& options = {});

 protected:
  void update(size_t, const nn::Parameter&, const Tensor&) override {}
  std::vector<std::string> state_names() const override { return {}; }
};

}  // namespace kiln::optim
