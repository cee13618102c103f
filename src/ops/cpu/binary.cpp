// CPU binary kernels (arithmetic, comparisons, fused vjps), their scalar
// forms, and where.
#include "src/ops/cpu/copy.h"
#include "src/ops/cpu/elementwise_kernels.h"

namespace kiln::cpu {

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
  binary_kernel<FastLoops>(op, out, a, b, p);
}

void binary_scalar(BinaryOp op, const Tensor& out, const Tensor& a, Scalar s, bool reversed, OpParams p) {
  binary_scalar_kernel<FastLoops>(op, out, a, s, reversed, p);
}

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  where_kernel<FastLoops>(out, cond, a, b);
}

void where_scalar(const Tensor& out, const Tensor& cond, const Tensor& x, Scalar s, bool scalar_if_true) {
  const Tensor v = scalar_operand(s, out.dtype());
  if (scalar_if_true) where(out, cond, v, x);
  else where(out, cond, x, v);
}

}  // namespace kiln::cpu
