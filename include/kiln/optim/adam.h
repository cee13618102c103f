// Adam (with optional coupled L2 weight decay) and AdamW (decoupled weight
// decay) (O1), as torch.optim.Adam / AdamW:
//   p *= 1 - lr * weight_decay                 (AdamW; only where p.decay())
//   g += weight_decay * p                      (Adam;  only where p.decay())
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2          (amsgrad: v_max = max(v_max, v), used below)
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// t counts this parameter's own steps (state "step"), as in PyTorch. The state
// (step, exp_avg, exp_avg_sq, max_exp_avg_sq) is allocated at the first step.
#pragma once

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

// Adam's and AdamW's options: the same fields, with PyTorch's default decay
// for each (Adam 0, coupled; AdamW 1e-2, decoupled).
template <double DefaultDecay>
struct AdamOptionsWith {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = DefaultDecay;
  bool amsgrad = false;
  bool maximize = false;

  template <class F>
  void visit(F&& f) {
    f("lr", lr), f("beta1", beta1), f("beta2", beta2), f("eps", eps), f("weight_decay", weight_decay);
    f("amsgrad", amsgrad), f("maximize", maximize);
  }
  void validate(const char* op) const;
};
using AdamOptions = AdamOptionsWith<0.0>;    // weight_decay: L2, added to the gradient
using AdamWOptions = AdamOptionsWith<1e-2>;  // weight_decay: decoupled, p *= 1 - lr * weight_decay

namespace detail {
// The update both share; Decoupled picks AdamW's decay.
template <class Options, bool Decoupled>
class AdamFamily : public OptimizerWith<Options> {
 protected:
  using OptimizerWith<Options>::OptimizerWith;
  void update(size_t group, const nn::Parameter& param, const Tensor& grad) override;
  std::vector<std::string> state_names() const override {
    return {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  }
};
}  // namespace detail

class Adam : public detail::AdamFamily<AdamOptions, false> {
 public:
  Adam(nn::ParameterList params, const AdamOptions& options = {});
  Adam(std::vector<ParamGroup> groups, const AdamOptions& defaults = {});
};

class AdamW : public detail::AdamFamily<AdamWOptions, true> {
 public:
  AdamW(nn::ParameterList params, const AdamWOptions& options = {});
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& defaults = {});
};

}  // namespace kiln::optim
