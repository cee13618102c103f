// CPU layer and batch normalisation: the kernels' two copies (NOTE [Per-ISA kernels] in CMakeLists.txt);
// contracts as in ../norm.h, whose functions pick one with KILN_ISA_CALL.
#pragma once

#include "src/backend/cpu/isa.h"
#include "src/backend/cpu/nn/norm.h"

namespace kiln::backend::cpu {

KILN_ISA_DECLARE(
    void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, bool rms, const Tensor& out,
                    const Tensor& mean, const Tensor& rstd);
    void layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight, const Tensor& mean,
                             const Tensor& rstd, bool rms, const Tensor& gx, const Tensor& gweight,
                             const Tensor& gbias);
    void batch_norm_stats(const Tensor& x, const Tensor& mean, const Tensor& var);
    void batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                          const Tensor& bias, const Tensor& out);
    void batch_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                             const Tensor& weight, bool training, const Tensor& gx, const Tensor& gweight,
                             const Tensor& gbias);)

}  // namespace kiln::backend::cpu
