// CPU losses: the entry points, which run the kernel copy for the CPU's
// vector ISA (isa/loss.cpp).
#include "src/backend/cpu/nn/isa/loss.h"
#include "src/backend/cpu/nn/loss.h"

namespace kiln::backend::cpu {

void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& weights, int64_t ignore_index,
                   double label_smoothing, const Tensor& lse, const Tensor& probs, const Tensor& rows, double* total,
                   double* weight_sum) {
  KILN_ISA_CALL(cross_entropy, logits, targets, weights, ignore_index, label_smoothing, lse, probs, rows, total,
                weight_sum);
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& weights,
                            int64_t ignore_index, double label_smoothing, const Tensor& lse, const Tensor& probs,
                            const Tensor& grad, double scale, const Tensor& grad_logits) {
  KILN_ISA_CALL(cross_entropy_backward, logits, targets, weights, ignore_index, label_smoothing, lse, probs, grad,
                scale, grad_logits);
}

double pointwise_loss(PointwiseLoss kind, double beta, const Tensor& x, const Tensor& y, const Tensor& weight,
                      const Tensor& pos_weight, const Tensor& out) {
  return KILN_ISA_CALL(pointwise_loss, kind, beta, x, y, weight, pos_weight, out);
}

void pointwise_loss_backward(PointwiseLoss kind, double beta, const Tensor& x, const Tensor& y,
                             const Tensor& weight, const Tensor& pos_weight, const Tensor& grad, double scale,
                             const Tensor& gx, const Tensor& gy) {
  KILN_ISA_CALL(pointwise_loss_backward, kind, beta, x, y, weight, pos_weight, grad, scale, gx, gy);
}

int64_t first_bad_target(const Tensor& targets, int64_t classes, int64_t ignore_index) {
  return KILN_ISA_CALL(first_bad_target, targets, classes, ignore_index);
}

bool all_probabilities(const Tensor& x) { return KILN_ISA_CALL(all_probabilities, x); }

}  // namespace kiln::backend::cpu
