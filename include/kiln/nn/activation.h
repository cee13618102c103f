// Stateless layers (L16): activations, Flatten, Identity. They hold no
// parameters; as modules they compose in Sequential and print in repr().
#pragma once

#include <cstdint>
#include <string>

#include "kiln/nn/module.h"
#include "kiln/ops/unary.h"

namespace kiln::nn {

struct ReLU : Module {
  Tensor forward(const Tensor& x) const { return relu(x); }
};

struct GELU : Module {
  explicit GELU(GeluApproximation approximate = GeluApproximation::none) : approximate(approximate) {}
  Tensor forward(const Tensor& x) const { return gelu(x, approximate); }
  std::string extra_repr() const override;
  GeluApproximation approximate;
};

struct Tanh : Module {
  Tensor forward(const Tensor& x) const { return tanh(x); }
};

struct Sigmoid : Module {
  Tensor forward(const Tensor& x) const { return sigmoid(x); }
};

struct SiLU : Module {
  Tensor forward(const Tensor& x) const { return silu(x); }
};

struct LeakyReLU : Module {
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope(negative_slope) {}
  Tensor forward(const Tensor& x) const { return leaky_relu(x, negative_slope); }
  std::string extra_repr() const override;
  double negative_slope;
};

struct Identity : Module {
  Tensor forward(const Tensor& x) const { return x; }
};

// Flattens dims start_dim..end_dim into one: [B, C, H, W] -> [B, C*H*W] by default.
struct Flatten : Module {
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) const { return x.flatten(start_dim, end_dim); }
  std::string extra_repr() const override;
  int64_t start_dim, end_dim;
};

}  // namespace kiln::nn
