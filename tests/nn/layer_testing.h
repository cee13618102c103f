// Helpers shared by the layer tests: a gradcheck through a module's forward
// with respect to its input and every parameter.
#pragma once

#include <vector>

#include "tests/support/nn_testing.h"

namespace kiln::testing {

// Checks d forward(x) / d (x, parameters...) by finite differences. The module's
// parameters must be f64; gradcheck perturbs them in place, so forward sees it.
template <class M>
void expect_module_gradcheck(M& module, const Tensor& x) {
  std::vector<Tensor> inputs{x};
  for (const auto& [name, p] : module.named_parameters()) inputs.push_back(p.value());
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return module.forward(in[0]); }, inputs);
}

// An Init for f64 gradchecks, with non-zero biases.
inline nn::Init f64_init(Rngs& rngs) {
  nn::Init init(rngs);
  init.dtype = kF64;
  init.bias = nn::init::uniform(-0.5, 0.5);
  return init;
}

}  // namespace kiln::testing
