#include "kiln/optim/sgd.h"

#include <cmath>

#include "src/backend/cpu/dispatch.h"
#include "src/backend/cpu/optim/fused_updates.h"
#include "src/optim/dispatch.h"

namespace kiln::optim {

void SGDOptions::validate(const char* op) const {
  check_non_negative(op, "lr", lr);
  check_non_negative(op, "momentum", momentum);
  check_non_negative(op, "weight_decay", weight_decay);
  KILN_CHECK(std::isfinite(dampening), op, "dampening must be finite, got {}", dampening);
  KILN_CHECK(!nesterov || (momentum > 0.0 && dampening == 0.0), op,
             "Nesterov momentum needs momentum > 0 and dampening 0 (got momentum {}, dampening {})", momentum,
             dampening);
}

SGD::SGD(nn::ParameterList params, const SGDOptions& options) : SGD(std::vector<ParamGroup>{{std::move(params)}}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& defaults)
    : OptimizerWith("SGD", std::move(groups), defaults) {}

void SGD::update(size_t group, const nn::Parameter& param, const Tensor& grad) {
  const SGDOptions& o = options_[group];
  backend::cpu::SgdArgs args{o.lr, o.momentum, o.dampening, param.decay() ? o.weight_decay : 0.0, o.nesterov, o.maximize, false};
  Tensor buf;
  if (o.momentum != 0.0) {
    Tensor& state = param.state("momentum_buffer");
    args.first = !state.defined();
    if (args.first) state = Tensor::empty(param.shape(), param.dtype(), param.value().device());
    buf = state;
  }
  backend::cpu::dispatch_only<float, double>(param.dtype(), [&]<class T>(type_tag<T>) {
    backend::cpu::sgd_update<T>(param.value().data<T>(), grad.data<T>(), buf.defined() ? buf.data<T>() : nullptr,
                       param.numel(), args);
  });
}

}  // namespace kiln::optim
