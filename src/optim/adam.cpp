#include "kiln/optim/adam.h"

#include <cmath>

#include "src/backend/cpu/dispatch.h"
#include "src/backend/cpu/optim/fused_updates.h"
#include "src/optim/dispatch.h"

namespace kiln::optim {

template <double DefaultDecay>
void AdamOptionsWith<DefaultDecay>::validate(const char* op) const {
  check_non_negative(op, "lr", lr);
  check_unit_interval(op, "beta1", beta1);
  check_unit_interval(op, "beta2", beta2);
  check_non_negative(op, "eps", eps);
  check_non_negative(op, "weight_decay", weight_decay);
}
template struct AdamOptionsWith<0.0>;
template struct AdamOptionsWith<1e-2>;

Adam::Adam(nn::ParameterList params, const AdamOptions& options)
    : Adam(std::vector<ParamGroup>{{std::move(params)}}, options) {}
Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& defaults)
    : AdamFamily("Adam", std::move(groups), defaults) {}

AdamW::AdamW(nn::ParameterList params, const AdamWOptions& options)
    : AdamW(std::vector<ParamGroup>{{std::move(params)}}, options) {}
AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& defaults)
    : AdamFamily("AdamW", std::move(groups), defaults) {}

namespace detail {

template <class Options, bool Decoupled>
void AdamFamily<Options, Decoupled>::update(size_t group, const nn::Parameter& param, const Tensor& grad) {
  const Options& o = this->options_[group];
  Tensor& step = param.state("step");
  if (!step.defined()) step = zeros({}, {.dtype = kI64});
  int64_t t = ++*step.data<int64_t>();
  Tensor& m = zeros_state(param, "exp_avg");
  Tensor& v = zeros_state(param, "exp_avg_sq");
  Tensor vmax = o.amsgrad ? zeros_state(param, "max_exp_avg_sq") : Tensor();

  const double decay = param.decay() ? o.weight_decay : 0.0;
  backend::cpu::AdamArgs args{};
  args.beta1 = o.beta1;
  args.beta2 = o.beta2;
  args.eps = o.eps;
  args.l2 = Decoupled ? 0.0 : decay;
  args.decay_factor = Decoupled ? 1.0 - o.lr * decay : 1.0;
  args.step_size = o.lr / (1.0 - std::pow(o.beta1, double(t)));
  args.bias_correction2_sqrt = std::sqrt(1.0 - std::pow(o.beta2, double(t)));
  args.amsgrad = o.amsgrad;
  args.maximize = o.maximize;
  backend::cpu::dispatch_only<float, double>(param.dtype(), [&]<class T>(type_tag<T>) {
    backend::cpu::adam_update<T>(param.value().data<T>(), grad.data<T>(), m.data<T>(), v.data<T>(),
                        vmax.defined() ? vmax.data<T>() : nullptr, param.numel(), args);
  });
}

template class AdamFamily<AdamOptions, false>;
template class AdamFamily<AdamWOptions, true>;

}  // namespace detail

}  // namespace kiln::optim
