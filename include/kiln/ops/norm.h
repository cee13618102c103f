// Normalisation: layer_norm, rms_norm and batch_norm as fused kernels that
// save the statistics (mean, rstd) for a fused backward.
// Letter legend: M = rows normalised independently, N = elements per row
// (the product of normalized_shape), B = batch, C = channels, L = spatial
// positions (product of the dims after C; 1 for [B, C]).
#pragma once

#include "kiln/core/tensor.h"

namespace kiln {

/// PyTorch's F.layer_norm: x [..., *normalized_shape] normalised over its
/// trailing dims with the biased variance: (x - mean) / sqrt(var + eps) *
/// weight + bias. weight and bias (optional) have shape normalized_shape and
/// x's dtype. f32, f64, bf16 (statistics in f32 for bf16).
///   Tensor y = layer_norm(x, {768}, w, b);   // x [B, T, 768]
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);

/// Root-mean-square norm over the trailing dims: x / sqrt(mean(x^2) + eps) *
/// weight (no mean subtracted, no bias). The specs give no eps; kiln's
/// default 1e-6 is the LLaMA/T5 convention (PyTorch >= 2.4's F.rms_norm with
/// eps=None uses finfo(dtype).eps instead: pass it explicitly to match).
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {}, double eps = 1e-6);

struct BatchNormOptions {
  double momentum = 0.1;  // running = (1 - momentum) * running + momentum * batch_stat
  double eps = 1e-5;
  /// Running variance update with the unbiased batch variance (n / (n - 1)),
  /// as PyTorch does. Default false: spec 000 (SPECS L8) updates it with the
  /// population (biased) variance, the same one used to normalise.
  bool unbiased_running_var = false;
};

/// F.batch_norm for x [B, C], [B, C, L] or [B, C, H, W] (any rank >= 2;
/// channels are dim 1). training: normalise with the batch statistics over
/// every dim but C (biased variance) and, when the running buffers [C] are
/// defined, update them in place without recording a gradient. Eval: use the
/// running buffers (then required). weight/bias [C] are optional.
///   Tensor y = batch_norm(x, rm, rv, w, b, /*training=*/true, {.momentum = 0.1});
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, BatchNormOptions opts = {});

}  // namespace kiln
