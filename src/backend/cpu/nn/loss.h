// CPU kernels for the fused losses: cross-entropy over rows of logits, and
// the pointwise losses (mse, l1, smooth l1, bce, bce with logits) with their
// reductions. The ops layer (src/ops/loss.cpp) checks every argument; kernels
// get contiguous tensors. Sums are reduced over fixed chunks (their count
// depends only on the shapes) added in order, so results do not depend on
// the thread count. ref:: holds the plain f64 loops the tests compare with.
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln::backend::cpu {

// Letter legend: R = rows (positions), C = classes.

/// Cross-entropy over rows. logits [R, C] floating; targets [R] i32/i64, each
/// in [0, C) or == ignore_index (checked by first_bad_target); weights [R]
/// (logits' dtype) or undefined (all 1). Per row r with lse_r = logsumexp(x_r):
///   loss_r = w_r * (lse_r - (1 - s) x_r[t_r] - s mean(x_r)),  0 when ignored.
/// Writes lse [R] (acc dtype) and, when defined, probs [R, C] (softmax of
/// every row, logits' dtype: the backward then needs no exp) and
/// rows [R] (logits' dtype); returns sum(loss_r) and sum(w_r) over
/// non-ignored rows in *total and *weight_sum.
void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& weights, int64_t ignore_index,
                   double label_smoothing, const Tensor& lse, const Tensor& probs, const Tensor& rows, double* total,
                   double* weight_sum);
/// grad_logits[r, j] = coef_r * (p_rj - (1 - s) [j == t_r] - s / C), where p is
/// probs when defined, else exp(x_rj - lse_r), and coef_r = scale * w_r * grad[r]
/// (grad has R elements) or scale * w_r * grad[0] (one element); 0 for ignored rows.
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& weights,
                            int64_t ignore_index, double label_smoothing, const Tensor& lse, const Tensor& probs,
                            const Tensor& grad, double scale, const Tensor& grad_logits);
/// The index of the first target outside [0, C) that is not ignore_index, or -1.
int64_t first_bad_target(const Tensor& targets, int64_t classes, int64_t ignore_index);

enum class PointwiseLoss { mse, l1, smooth_l1, bce, bce_with_logits };

/// Pointwise loss l(x, y) over n elements: x, y contiguous of one floating
/// dtype; weight, pos_weight (bce_with_logits only) the same or undefined.
///   mse (x - y)^2; l1 |x - y|; smooth_l1 0.5 d^2 / beta if |d| < beta else |d| - 0.5 beta;
///   bce -w (y max(log x, -100) + (1 - y) max(log(1 - x), -100));
///   bce_with_logits w ((1 - y) x + (1 + (pw - 1) y) softplus(-x)).
/// With `out` defined, writes each element's loss there; else returns their sum (f64).
double pointwise_loss(PointwiseLoss kind, double beta, const Tensor& x, const Tensor& y, const Tensor& weight,
                      const Tensor& pos_weight, const Tensor& out);
/// gx = scale * grad * dl/dx, gy = scale * grad * dl/dy (either may be
/// undefined); grad has n elements or one (a reduced loss).
void pointwise_loss_backward(PointwiseLoss kind, double beta, const Tensor& x, const Tensor& y,
                             const Tensor& weight, const Tensor& pos_weight, const Tensor& grad, double scale,
                             const Tensor& gx, const Tensor& gy);
/// Whether every element of x lies in [0, 1] (bce's precondition; NaN fails).
bool all_probabilities(const Tensor& x);

namespace ref {
void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& weights, int64_t ignore_index,
                   double label_smoothing, const Tensor& lse, const Tensor& probs, const Tensor& rows, double* total,
                   double* weight_sum);
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& weights,
                            int64_t ignore_index, double label_smoothing, const Tensor& lse, const Tensor& probs,
                            const Tensor& grad, double scale, const Tensor& grad_logits);
double pointwise_loss(PointwiseLoss kind, double beta, const Tensor& x, const Tensor& y, const Tensor& weight,
                      const Tensor& pos_weight, const Tensor& out);
void pointwise_loss_backward(PointwiseLoss kind, double beta, const Tensor& x, const Tensor& y,
                             const Tensor& weight, const Tensor& pos_weight, const Tensor& grad, double scale,
                             const Tensor& gx, const Tensor& gy);
}  // namespace ref

}  // namespace kiln::backend::cpu
