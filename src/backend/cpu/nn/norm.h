// CPU kernels for layer_norm / rms_norm and batch_norm: fused forward passes
// that also return the statistics, and fused backward passes that use them.
// The plain ref:: versions (f64 loops, one element at a time) are what the
// tests hold the fast ones to. Inputs are checked by the ops layer
// (src/ops/norm.cpp); kernels get contiguous tensors of one floating dtype T.
// Statistics (mean, rstd, var) are in acc_t<T>: f32 for bf16/f32, f64 for f64.
#pragma once

#include "kiln/core/tensor.h"

namespace kiln::backend::cpu {

/// Rows of a layer norm: x, out [M, N]; weight, bias [N] or undefined;
/// mean, rstd [M] (acc dtype). rms: no mean is subtracted (mean may be
/// undefined) and rstd = 1 / sqrt(mean(x^2) + eps).
void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, bool rms, const Tensor& out,
                const Tensor& mean, const Tensor& rstd);
/// Its backward for upstream g [M, N]: with xhat = (x - mean) * rstd and
/// h = g * weight,
///   gx = rstd * (h - mean_row(h) - xhat * mean_row(h * xhat))   (rms: no mean_row(h) term)
///   gweight = sum_rows(g * xhat), gbias = sum_rows(g).
/// Any of gx, gweight, gbias may be undefined (not needed). Row partial sums
/// are combined in a fixed order, so results do not depend on the thread count.
void layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, bool rms, const Tensor& gx, const Tensor& gweight, const Tensor& gbias);

/// Per-channel mean and biased variance of x [B, C, L] into mean, var [C]
/// (acc dtype). Each row of L elements is summed twice while in cache
/// (mean, then squared deviations) and rows are merged with Chan's update.
void batch_norm_stats(const Tensor& x, const Tensor& mean, const Tensor& var);
/// out = (x - mean[c]) * invstd[c] * weight[c] + bias[c] for x, out [B, C, L];
/// mean, invstd [C] acc dtype; weight, bias [C] or undefined.
void batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                      const Tensor& bias, const Tensor& out);
/// Backward. training (batch statistics, n = B * L):
///   gx = weight * invstd * (g - sum(g) / n - xhat * sum(g * xhat) / n)
/// eval (constant statistics): gx = weight * invstd * g. Both:
///   gweight = sum(g * xhat), gbias = sum(g) per channel. Outputs may be undefined.
void batch_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                         const Tensor& weight, bool training, const Tensor& gx, const Tensor& gweight,
                         const Tensor& gbias);

namespace ref {
void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, bool rms, const Tensor& out,
                const Tensor& mean, const Tensor& rstd);
void layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, bool rms, const Tensor& gx, const Tensor& gweight, const Tensor& gbias);
void batch_norm_stats(const Tensor& x, const Tensor& mean, const Tensor& var);
void batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                      const Tensor& bias, const Tensor& out);
void batch_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                         const Tensor& weight, bool training, const Tensor& gx, const Tensor& gweight,
                         const Tensor& gbias);
}  // namespace ref

}  // namespace kiln::backend::cpu
