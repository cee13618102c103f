// A linear layer followed by GELU as one op (a Transformer MLP's first layer,
// the DiT's mlp.0 + mlp.1): gelu(linear(x, weight, bias)) with the GELU and
// its derivative taken in one pass over the product, and a backward that
// multiplies by the saved derivative and sums the bias gradient in one pass
// (no second exponential, no separate reduction). Letter legend: I
// in_features, O out_features.
#pragma once

#include "kiln/core/tensor.h"
#include "kiln/ops/unary.h"

namespace kiln {

/// gelu(linear(x, weight, bias), approximate): x [..., I], weight [O, I],
/// bias [O] (optional) -> [..., O]; f32, f64 or bf16 (bf16 computes the GELU
/// in f32 and keeps its derivative in f32). The tanh form is fused; `none`
/// (the exact GELU) runs the two ops. Same values as the two ops within f32
/// rounding; errors as linear's. Differentiable in x, weight and bias (double
/// backward through composed ops).
///
///   Tensor h = linear_gelu(x, fc1.weight, fc1.bias, GeluApproximation::tanh);
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
                   GeluApproximation approximate = GeluApproximation::tanh);

}  // namespace kiln
