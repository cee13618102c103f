// adaLN's modulation and gated residual (DiT's adaLN-Zero block, SPECS L17 /
// G6) as single fused ops: one pass forward and one backward each, where the
// composed ops (unsqueeze, add, mul, add and their broadcast-gradient sums)
// take four or five. Letter legend: B batch, T tokens, D features.
#pragma once

#include "kiln/core/tensor.h"

namespace kiln {

/// x * (1 + scale) + shift for x [B, T, D] and shift, scale [B, D], broadcast
/// over T (DiT's `modulate`); f32, f64 or bf16 (bf16 computes in f32), one
/// dtype. Differentiable in all three (double backward through composed ops).
///
///   Tensor h = adaln_modulate(layer_norm(x), shift, scale);
Tensor adaln_modulate(const Tensor& x, const Tensor& shift, const Tensor& scale);

/// layer_norm(x) * (1 + scale) + shift: LayerNorm over D without affine
/// (eps inside the square root, biased variance) followed by adaln_modulate,
/// one pass each way; x [B, T, D], shift and scale [B, D]. The statistics are
/// computed in f32 for bf16 (f64 for f64), as nn::LayerNorm does under bf16
/// compute, and the output has x's dtype. Differentiable in all three.
Tensor layer_norm_modulate(const Tensor& x, const Tensor& shift, const Tensor& scale, double eps);

/// x + gate * y for x, y [B, T, D] and gate [B, D], broadcast over T
/// (adaLN-Zero's gated residual); dtypes and gradients as adaln_modulate.
Tensor gated_residual(const Tensor& x, const Tensor& gate, const Tensor& y);

}  // namespace kiln
