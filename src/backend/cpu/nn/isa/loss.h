// CPU losses: the kernels' two copies (NOTE [Per-ISA kernels] in CMakeLists.txt);
// contracts as in ../loss.h, whose functions pick one with KILN_ISA_CALL.
#pragma once

#include "src/backend/cpu/isa.h"
#include "src/backend/cpu/nn/loss.h"

namespace kiln::backend::cpu {

KILN_ISA_DECLARE(
    void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& weights, int64_t ignore_index,
                       double label_smoothing, const Tensor& lse, const Tensor& probs, const Tensor& rows,
                       double* total, double* weight_sum);
    void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& weights,
                                int64_t ignore_index, double label_smoothing, const Tensor& lse, const Tensor& probs,
                                const Tensor& grad, double scale, const Tensor& grad_logits);
    double pointwise_loss(PointwiseLoss kind, double beta, const Tensor& x, const Tensor& y, const Tensor& weight,
                          const Tensor& pos_weight, const Tensor& out);
    void pointwise_loss_backward(PointwiseLoss kind, double beta, const Tensor& x, const Tensor& y,
                                 const Tensor& weight, const Tensor& pos_weight, const Tensor& grad, double scale,
                                 const Tensor& gx, const Tensor& gy);
    int64_t first_bad_target(const Tensor& targets, int64_t classes, int64_t ignore_index);
    bool all_probabilities(const Tensor& x);)

}  // namespace kiln::backend::cpu
