// Parameter: a shared handle to one trainable tensor and what travels with it.
//
// Spec 001 "Param — four tensors": the value, its gradient, and the optimizer's
// moments co-located with the parameter (allocated lazily by a stateful
// optimizer's first step; SGD without momentum never allocates them), plus the
// weight-decay flag (biases and normalisation scales default to no decay, M11).
// Copies of a Parameter share everything: modules, parameter lists and
// optimizers all see the same slot, so parameters() is live (M6).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "kiln/core/tensor.h"

namespace kiln::nn {

class Parameter {
 public:
  Parameter() = default;  // undefined: an absent parameter (e.g. Linear without bias)
  // `value` becomes a leaf that requires grad (it is detached from any graph).
  explicit Parameter(const Tensor& value, bool decay = true);

  bool defined() const { return slot_ != nullptr; }
  const Tensor& value() const;  // an undefined Tensor for an undefined Parameter
  operator const Tensor&() const { return value(); }  // pass straight to ops: linear(x, weight, bias)
  Tensor grad() const { return value().defined() ? value().grad() : Tensor(); }
  const Shape& shape() const { return value().shape(); }
  DType dtype() const { return value().dtype(); }
  int64_t numel() const { return value().numel(); }

  bool decay() const;
  void set_decay(bool on) const;
  bool requires_grad() const { return value().requires_grad(); }
  void requires_grad_(bool on) const;  // false freezes it: no grad, optimizers skip it

  // Optimizer state by name ("exp_avg", "momentum_buffer", ...): undefined until
  // an optimizer sets it. Part of every checkpoint.
  Tensor& state(const std::string& name) const;
  const std::map<std::string, Tensor>& states() const;
  void clear_state() const;

  // Identity: two handles to the same slot are the same parameter.
  const void* id() const { return slot_.get(); }
  bool is_same(const Parameter& other) const { return slot_ == other.slot_; }

 private:
  friend class ParameterSubstitution;
  // Puts `value` in the slot and returns what was there: every handle (the
  // module's member, parameter lists) then reads `value`. Only the scoped
  // substitution of functional_call uses it, and it always swaps back.
  Tensor exchange_value(Tensor value) const noexcept;

  struct Slot {
    Tensor value;
    bool decay = true;
    std::map<std::string, Tensor> state;
  };
  std::shared_ptr<Slot> slot_;
};

}  // namespace kiln::nn
