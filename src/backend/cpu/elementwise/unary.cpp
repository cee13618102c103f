// CPU unary kernels and clamp: the copy for the CPU's vector ISA
// (src/backend/cpu/elementwise/isa/unary.cpp).
#include "src/backend/cpu/elementwise/isa/elementwise.h"

namespace kiln::backend::cpu {

void unary(UnaryOp op, const Tensor& out, const Tensor& x, OpParams p) { KILN_ISA_CALL(unary, op, out, x, p); }

void clamp(const Tensor& out, const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  KILN_ISA_CALL(clamp, out, x, lo, hi);
}

}  // namespace kiln::backend::cpu
