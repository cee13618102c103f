// CPU unary kernels (math, activations, predicates) and clamp.
#include "src/ops/cpu/elementwise_kernels.h"

namespace kiln::cpu {

void unary(UnaryOp op, const Tensor& out, const Tensor& x, OpParams p) { unary_kernel<FastLoops>(op, out, x, p); }

void clamp(const Tensor& out, const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  clamp_kernel<FastLoops>(out, x, lo, hi);
}

}  // namespace kiln::cpu
