// The GELU (tanh form) of a linear layer's output, fused with what its
// backward needs (kiln/ops/linear_gelu.h): the forward writes gelu(u) and the
// derivative gelu'(u) in one pass over the pre-activation u (one exponential
// per element), and the backward multiplies the output gradient by the saved
// derivative and sums the product over rows for the bias gradient in the same
// pass, where the unfused ops took a GELU pass forward, a GELU-backward pass
// (a second exponential) and a bias-gradient reduction. Letter legend: R
// rows (every leading dim flattened), O the layer's out_features.
#pragma once

#include "kiln/core/tensor.h"

namespace kiln::backend::cpu {

/// y = gelu_tanh(u) = u / (1 + e^(-v)), v = 2 sqrt(2/pi) (u + 0.044715 u^3),
/// bit for bit the elementwise gelu kernel's; and, when d is defined, d =
/// gelu_tanh'(u), bit for bit the gelu backward kernel's derivative. u, y: one
/// dtype (f32, f64, bf16), contiguous, same numel; d contiguous, same numel, in
/// the compute dtype (f64 for f64, else f32). y may alias u (in place); d may
/// alias u when both have the same dtype.
void gelu_tanh_with_grad(const Tensor& u, const Tensor& y, const Tensor& d);

/// gu = g * d ([R, O]; g and gu one dtype, d as gelu_tanh_with_grad wrote it),
/// rounded once to gu's dtype; and, when gb ([O], gu's dtype) is defined, gb
/// = the sum over rows of gu (of the rounded values), accumulated in the
/// compute dtype over fixed row blocks, so the result does not depend on the
/// thread count. All contiguous.
void gelu_grad_bias(const Tensor& g, const Tensor& d, const Tensor& gu, const Tensor& gb);

namespace ref {
// Plain loops in f64 over the same contracts.
void gelu_tanh_with_grad(const Tensor& u, const Tensor& y, const Tensor& d);
void gelu_grad_bias(const Tensor& g, const Tensor& d, const Tensor& gu, const Tensor& gb);
}  // namespace ref

}  // namespace kiln::backend::cpu
