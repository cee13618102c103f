// Small helpers shared by the optimizers' implementations.
#pragma once

#include <cmath>

#include "kiln/core/error.h"
#include "kiln/core/tensor.h"
#include "kiln/nn/parameter.h"
#include "kiln/ops/creation.h"

namespace kiln::optim {

inline void check_non_negative(const char* op, const char* what, double value) {
  KILN_CHECK(std::isfinite(value) && value >= 0.0, op, "{} must be finite and >= 0, got {}", what, value);
}

inline void check_unit_interval(const char* op, const char* what, double value) {
  KILN_CHECK(value >= 0.0 && value < 1.0, op, "{} must be in [0, 1), got {}", what, value);
}

// The per-parameter state `name`, allocated as zeros like the parameter on
// first use (std::map: the reference stays valid as other states are added).
inline Tensor& zeros_state(const nn::Parameter& param, const char* name) {
  Tensor& s = param.state(name);
  if (!s.defined()) s = zeros(param.shape(), {.dtype = param.dtype(), .device = param.value().device()});
  return s;
}

}  // namespace kiln::optim
