// CPU kernels of adaln_modulate and gated_residual (kiln/ops/modulate.h):
// one pass over the [B, T, D] rows each way, the [B, D] operands' gradients
// summed over T in the compute dtype. Plain loops over D that vectorize; the
// reference is the same math composed of kiln ops (tests/ops/modulate_test.cpp).
#pragma once

#include "kiln/core/tensor.h"

namespace kiln::backend::cpu {

// Every kernel: [B, T, D] tensors contiguous; [B, D] ones with a unit last
// stride and any row stride (DiT's shift, scale and gate are chunks of one
// [B, 6D] projection); one dtype (f32, f64 or bf16; bf16 computes in f32).

/// out = x * (1 + scale) + shift.
void adaln_modulate_forward(const Tensor& x, const Tensor& shift, const Tensor& scale, const Tensor& out);
/// dx = g * (1 + scale), dshift = sum_T g, dscale = sum_T g * x; an undefined
/// output is skipped. dshift, dscale contiguous [B, D].
void adaln_modulate_backward(const Tensor& g, const Tensor& x, const Tensor& scale, const Tensor& dx,
                             const Tensor& dshift, const Tensor& dscale);
/// out = (x - mean) * rstd * (1 + scale) + shift per [D] row, rstd =
/// 1 / sqrt(var + eps); writes the rows' mean and rstd (contiguous [B, T],
/// f64 for f64 inputs, else f32) for the backward.
void layer_norm_modulate_forward(const Tensor& x, const Tensor& shift, const Tensor& scale, double eps,
                                 const Tensor& out, const Tensor& mean, const Tensor& rstd);
/// With xh = (x - mean) rstd and gy = g (1 + scale): dx = rstd (gy - avg(gy)
/// - xh avg(gy xh)) over each row, dshift = sum_T g, dscale = sum_T g xh; an
/// undefined output is skipped.
void layer_norm_modulate_backward(const Tensor& g, const Tensor& x, const Tensor& scale, const Tensor& mean,
                                  const Tensor& rstd, const Tensor& dx, const Tensor& dshift, const Tensor& dscale);
/// out = x + gate * y.
void gated_residual_forward(const Tensor& x, const Tensor& gate, const Tensor& y, const Tensor& out);
/// dy = g * gate, dgate = sum_T g * y (dx is g itself); an undefined output is skipped.
void gated_residual_backward(const Tensor& g, const Tensor& gate, const Tensor& y, const Tensor& dgate,
                             const Tensor& dy);

}  // namespace kiln::backend::cpu
