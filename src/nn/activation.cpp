#include "kiln/nn/activation.h"

#include <fmt/format.h>

namespace kiln::nn {

std::string GELU::extra_repr() const {
  return approximate == GeluApproximation::tanh ? "approximate='tanh'" : "approximate='none'";
}

std::string LeakyReLU::extra_repr() const { return fmt::format("negative_slope={}", negative_slope); }

std::string Flatten::extra_repr() const { return fmt::format("start_dim={}, end_dim={}", start_dim, end_dim); }

}  // namespace kiln::nn
