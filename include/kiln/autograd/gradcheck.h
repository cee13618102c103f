// gradcheck: compares every vjp against central finite differences in f64.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

struct GradcheckOptions {
  double eps = 1e-6;    // finite-difference step
  double atol = 1e-5;
  double rtol = 1e-3;
};

struct GradcheckResult {
  bool ok = true;
  std::string message;  // the first mismatch: input, element, analytic vs numeric
  explicit operator bool() const { return ok; }
};

/// fn maps the inputs (f64 leaves with requires_grad) to one or more outputs.
/// For each output element o and input element i it checks
/// d o / d x_i from backward() against (f(x + eps) - f(x - eps)) / (2 eps),
/// within atol + rtol * |numeric|. Inputs are perturbed in place (restored).
GradcheckResult gradcheck(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions opts = {});
/// Single-output form.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions opts = {});

}  // namespace kiln
