// Elementwise unary math and activations. Integer inputs to float functions
// (exp, sin, ...) give f32, as in PyTorch.
#pragma once

#include <optional>

#include "kiln/core/tensor.h"

namespace kiln {

Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor expm1(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor square(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
/// The Gauss error function.
Tensor erf(const Tensor& x);
Tensor relu(const Tensor& x);
enum class GeluApproximation { none, tanh };
/// x * Phi(x) (erf form) or the tanh approximation.
Tensor gelu(const Tensor& x, GeluApproximation approximate = GeluApproximation::none);
/// x * sigmoid(x).
Tensor silu(const Tensor& x);
/// log(1 + exp(beta * x)) / beta, linear above `threshold` (torch defaults).
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
/// -1, 0 or 1 (zero gradient).
Tensor sign(const Tensor& x);
/// Rounding (zero gradient); round is half to even, like torch.round.
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor round(const Tensor& x);
/// Limits to [min, max]; either may be absent. Gradient passes where
/// min <= x <= max.
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor clamp_min(const Tensor& x, Scalar min);
Tensor clamp_max(const Tensor& x, Scalar max);

// In place (floating tensors).
Tensor neg_(const Tensor& x);
Tensor exp_(const Tensor& x);
Tensor sqrt_(const Tensor& x);
Tensor relu_(const Tensor& x);
Tensor clamp_(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);

}  // namespace kiln
