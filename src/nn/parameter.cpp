#include "kiln/nn/parameter.h"

#include <utility>

#include "kiln/core/error.h"

namespace kiln::nn {

Parameter::Parameter(const Tensor& value, bool decay) : slot_(std::make_shared<Slot>()) {
  KILN_CHECK(value.defined(), "Parameter", "value is an undefined tensor");
  KILN_CHECK(is_floating(value.dtype()), "Parameter", "value of shape {} has dtype {}; parameters are floating point",
             to_string(value.shape()), name(value.dtype()));
  slot_->value = value.detach();
  slot_->value.requires_grad_(true);
  slot_->decay = decay;
}

const Tensor& Parameter::value() const {
  static const Tensor undefined;
  return slot_ ? slot_->value : undefined;
}

bool Parameter::decay() const { return slot_ && slot_->decay; }

void Parameter::set_decay(bool on) const {
  KILN_CHECK(defined(), "Parameter.set_decay", "undefined parameter");
  slot_->decay = on;
}

void Parameter::requires_grad_(bool on) const {
  KILN_CHECK(defined(), "Parameter.requires_grad_", "undefined parameter");
  slot_->value.requires_grad_(on);
  if (!on) slot_->value.set_grad(Tensor());
}

Tensor& Parameter::state(const std::string& name) const {
  KILN_CHECK(defined(), "Parameter.state", "undefined parameter");
  return slot_->state[name];
}

const std::map<std::string, Tensor>& Parameter::states() const {
  static const std::map<std::string, Tensor> none;
  return slot_ ? slot_->state : none;
}

Tensor Parameter::exchange_value(Tensor value) const noexcept {
  std::swap(slot_->value, value);
  return value;
}

void Parameter::clear_state() const {
  if (slot_) slot_->state.clear();
}

}  // namespace kiln::nn
