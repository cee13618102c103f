// CPU binary kernels, their scalar forms, and where: the copy for the CPU's
// vector ISA (src/backend/cpu/elementwise/isa/binary.cpp); and the helpers they share.
#include "src/backend/cpu/copy/copy.h"
#include "src/backend/cpu/elementwise/elementwise_kernels.h"
#include "src/backend/cpu/elementwise/isa/elementwise.h"

namespace kiln::backend::cpu {

namespace fn {
void unsupported(const char* kind, int op, DType t) {
  KILN_FAIL("elementwise", "{} op #{} has no kernel for dtype {}", kind, op, name(t));
}
}  // namespace fn

Tensor convert(const Tensor& x, DType t) {
  if (x.dtype() == t) return x;
  Tensor out = Tensor::empty(x.shape(), t, x.device());
  copy(x, out);
  return out;
}

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, OpParams p) {
  KILN_ISA_CALL(binary, op, out, a, b, p);
}

void binary_scalar(BinaryOp op, const Tensor& out, const Tensor& a, Scalar s, bool reversed, OpParams p) {
  KILN_ISA_CALL(binary_scalar, op, out, a, s, reversed, p);
}

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  KILN_ISA_CALL(where, out, cond, a, b);
}

void where_scalar(const Tensor& out, const Tensor& cond, const Tensor& x, Scalar s, bool scalar_if_true) {
  const Tensor v = scalar_operand(s, out.dtype());
  if (scalar_if_true) where(out, cond, v, x);
  else where(out, cond, x, v);
}

}  // namespace kiln::backend::cpu
