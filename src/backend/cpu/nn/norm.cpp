// CPU layer and batch normalisation: the entry points, which run the kernel
// copy for the CPU's vector ISA (isa/norm.cpp).
#include "src/backend/cpu/nn/isa/norm.h"
#include "src/backend/cpu/nn/norm.h"

namespace kiln::backend::cpu {

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, bool rms, const Tensor& out,
                const Tensor& mean, const Tensor& rstd) {
  KILN_ISA_CALL(layer_norm, x, weight, bias, eps, rms, out, mean, rstd);
}

void layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, bool rms, const Tensor& gx, const Tensor& gweight, const Tensor& gbias) {
  KILN_ISA_CALL(layer_norm_backward, g, x, weight, mean, rstd, rms, gx, gweight, gbias);
}

void batch_norm_stats(const Tensor& x, const Tensor& mean, const Tensor& var) {
  KILN_ISA_CALL(batch_norm_stats, x, mean, var);
}

void batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                      const Tensor& bias, const Tensor& out) {
  KILN_ISA_CALL(batch_norm_apply, x, mean, invstd, weight, bias, out);
}

void batch_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                         const Tensor& weight, bool training, const Tensor& gx, const Tensor& gweight,
                         const Tensor& gbias) {
  KILN_ISA_CALL(batch_norm_backward, g, x, mean, invstd, weight, training, gx, gweight, gbias);
}

}  // namespace kiln::backend::cpu
