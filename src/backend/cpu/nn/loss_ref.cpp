// CPU losses: the reference kernels (plain loops), the oracle for the fast
// ones in isa/loss.cpp.
#include "src/backend/cpu/nn/loss.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kiln/core/parallel.h"
#include "src/backend/cpu/vec_math.h"

namespace kiln::backend::cpu {

namespace ref {

namespace {
double at(const Tensor& t, int64_t i) {
  return dispatch(t.dtype(), [&](auto tag) -> double {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) return static_cast<const T*>(t.data_ptr())[i] ? 1.0 : 0.0;
    else return double(static_cast<const T*>(t.data_ptr())[i]);
  });
}
void set(const Tensor& t, int64_t i, double v) {
  dispatch(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_floating(dtype_v<T>)) static_cast<T*>(t.data_ptr())[i] = T(v);
  });
}
}  // namespace

void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& weights, int64_t ignore_index,
                   double label_smoothing, const Tensor& lse, const Tensor& probs, const Tensor& rows, double* total,
                   double* weight_sum) {
  const int64_t R = targets.numel(), C = R ? logits.numel() / R : 0;
  *total = *weight_sum = 0;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t t = int64_t(at(targets, r));
    double m = -INFINITY, s = 0, sx = 0;
    for (int64_t j = 0; j < C; ++j) m = std::max(m, at(logits, r * C + j));
    for (int64_t j = 0; j < C; ++j) {
      s += std::exp(at(logits, r * C + j) - m);
      sx += at(logits, r * C + j);
    }
    const double l = m + std::log(s), w = weights.defined() ? at(weights, r) : 1.0;
    if (probs.defined())
      for (int64_t j = 0; j < C; ++j) set(probs, r * C + j, std::exp(at(logits, r * C + j) - l));
    if (t == ignore_index) {
      set(lse, r, 0);
      if (rows.defined()) set(rows, r, 0);
      continue;
    }
    const double loss = w * (l - (1 - label_smoothing) * at(logits, r * C + t) - label_smoothing * sx / double(C));
    set(lse, r, l);
    if (rows.defined()) set(rows, r, loss);
    *total += loss;
    *weight_sum += w;
  }
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& weights,
                            int64_t ignore_index, double label_smoothing, const Tensor& lse, const Tensor& probs,
                            const Tensor& grad, double scale, const Tensor& grad_logits) {
  const int64_t R = targets.numel(), C = R ? logits.numel() / R : 0;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t t = int64_t(at(targets, r));
    const bool ignored = t == ignore_index;
    const double coef = ignored ? 0.0
                                : scale * (weights.defined() ? at(weights, r) : 1.0) *
                                      at(grad, grad.numel() == R ? r : 0);
    for (int64_t j = 0; j < C; ++j) {
      const double p = ignored            ? 0.0
                       : probs.defined() ? at(probs, r * C + j)
                                         : std::exp(at(logits, r * C + j) - at(lse, r));
      const double q = (1 - label_smoothing) * (j == t) + label_smoothing / double(C);
      set(grad_logits, r * C + j, coef * (p - q));
    }
  }
}

double pointwise_loss(PointwiseLoss kind, double beta, const Tensor& x, const Tensor& y, const Tensor& weight,
                      const Tensor& pos_weight, const Tensor& out) {
  double total = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double a = at(x, i), b = at(y, i), w = weight.defined() ? at(weight, i) : 1.0;
    const double pw = pos_weight.defined() ? at(pos_weight, i) : 1.0, d = a - b;
    double l = 0;
    switch (kind) {
      case PointwiseLoss::mse: l = d * d; break;
      case PointwiseLoss::l1: l = std::abs(d); break;
      case PointwiseLoss::smooth_l1:
        l = std::abs(d) < beta ? 0.5 * d * d / beta : std::abs(d) - 0.5 * beta;
        break;
      case PointwiseLoss::bce:
        l = -(b * std::max(std::log(a), -100.0) + (1 - b) * std::max(std::log(1 - a), -100.0));
        break;
      case PointwiseLoss::bce_with_logits:
        l = (1 - b) * a + (1 + (pw - 1) * b) * std::log(1 + std::exp(-a));
        break;
    }
    l *= w;
    if (out.defined()) set(out, i, l);
    total += l;
  }
  return total;
}

void pointwise_loss_backward(PointwiseLoss kind, double beta, const Tensor& x, const Tensor& y,
                             const Tensor& weight, const Tensor& pos_weight, const Tensor& grad, double scale,
                             const Tensor& gx, const Tensor& gy) {
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double a = at(x, i), b = at(y, i), w = weight.defined() ? at(weight, i) : 1.0;
    const double pw = pos_weight.defined() ? at(pos_weight, i) : 1.0, d = a - b;
    const double sg = double((d > 0) - (d < 0));
    double dx = 0, dy = 0;
    switch (kind) {
      case PointwiseLoss::mse: dx = 2 * d, dy = -dx; break;
      case PointwiseLoss::l1: dx = sg, dy = -sg; break;
      case PointwiseLoss::smooth_l1:
        dx = std::abs(d) < beta ? d / beta : sg;
        dy = -dx;
        break;
      case PointwiseLoss::bce:
        dx = d / std::max((1 - a) * a, 1e-12);
        dy = std::max(std::log(1 - a), -100.0) - std::max(std::log(a), -100.0);
        break;
      case PointwiseLoss::bce_with_logits: {
        const double sig_neg = 1 / (1 + std::exp(a));
        dx = (1 - b) - (1 + (pw - 1) * b) * sig_neg;
        dy = -a + (pw - 1) * std::log(1 + std::exp(-a));
        break;
      }
    }
    const double k = scale * w * at(grad, grad.numel() == x.numel() ? i : 0);
    if (gx.defined()) set(gx, i, k * dx);
    if (gy.defined()) set(gy, i, k * dy);
  }
}

}  // namespace ref

}  // namespace kiln::backend::cpu
