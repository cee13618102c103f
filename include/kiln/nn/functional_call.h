// functional_call: a module run with substituted parameters (spec 000's
// split/merge boundary: state in, outputs out, the module itself unchanged),
// as torch.func.functional_call.
//
//   nn::StateDict fast = ...;  // e.g. {"fc1.weight": w - lr * g, ...}
//   Tensor y = nn::functional_call(model, fast, x);  // model.forward(x) with those parameters
//
// Keys are the dotted names of named_parameters(); parameters left out keep
// the module's own. Gradients flow to the substituted tensors (and through
// them, to whatever they were computed from: meta-learning's inner step),
// not to the parameters they stand in for. Buffers are not substituted (a
// BatchNorm in training still updates its running statistics).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/nn/module.h"
#include "kiln/nn/parameter.h"
#include "kiln/nn/state_dict.h"

namespace kiln::nn {

/// The parameters of `module` named in `params` replaced by those tensors for
/// this object's lifetime; the destructor puts the originals back, also when
/// the scope is left by an exception. Every key, shape and dtype is checked
/// before anything is replaced (a kiln::Error from `op` leaves the module as
/// it was). Not thread-safe: another thread using the module meanwhile sees
/// the substitutes.
class ParameterSubstitution {
 public:
  ParameterSubstitution(const Module& module, const StateDict& params, const char* op = "functional_call");
  ~ParameterSubstitution();
  ParameterSubstitution(const ParameterSubstitution&) = delete;
  ParameterSubstitution& operator=(const ParameterSubstitution&) = delete;

 private:
  std::vector<std::pair<Parameter, Tensor>> originals_;  // (parameter, its own value)
};

/// module.forward(args...) with `params` substituted (ParameterSubstitution);
/// returns what forward returns. The module is const: forward is.
template <ModuleType M, class... Args>
auto functional_call(const M& module, const StateDict& params, Args&&... args) {
  ParameterSubstitution substituted(module, params);
  return module.forward(std::forward<Args>(args)...);
}

template <ModuleType M, class... Args>
auto functional_call(const Shared<M>& module, const StateDict& params, Args&&... args) {
  return functional_call(*module, params, std::forward<Args>(args)...);
}

}  // namespace kiln::nn
