// SGD with momentum, dampening, Nesterov momentum and weight decay (O1), as
// torch.optim.SGD:
//   d = g + weight_decay * p                    (weight_decay only where p.decay())
//   buf = momentum * buf + (1 - dampening) * d  (buf = d at the first step)
//   d = nesterov ? d + momentum * buf : buf
//   p -= lr * d
// Plain SGD (momentum 0) allocates no state.
#pragma once

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct SGDOptions {
  double lr = 1e-2;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;

  template <class F>
  void visit(F&& f) {
    f("lr", lr), f("momentum", momentum), f("dampening", dampening), f("weight_decay", weight_decay);
    f("nesterov", nesterov), f("maximize", maximize);
  }
  void validate(const char* op) const;
};

class SGD : public OptimizerWith<SGDOptions> {
 public:
  SGD(nn::ParameterList params, const SGDOptions& options = {});
  SGD(std::vector<ParamGroup> groups, const SGDOptions& defaults = {});

 protected:
  void update(size_t group, const nn::Parameter& param, const Tensor& grad) override;
  std::vector<std::string> state_names() const override { return {"momentum_buffer"}; }
};

}  // namespace kiln::optim
