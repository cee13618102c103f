// The plain reference versions of the elementwise kernels: the same functors
// applied element by element with index arithmetic.
#include "src/backend/cpu/elementwise/elementwise_kernels.h"

namespace kiln::backend::cpu::ref {

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, OpParams p) {
  binary_kernel<RefLoops>(op, out, a, b, p);
}

void binary_scalar(BinaryOp op, const Tensor& out, const Tensor& a, Scalar s, bool reversed, OpParams p) {
  binary_scalar_kernel<RefLoops>(op, out, a, s, reversed, p);
}

void unary(UnaryOp op, const Tensor& out, const Tensor& x, OpParams p) { unary_kernel<RefLoops>(op, out, x, p); }

void clamp(const Tensor& out, const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  clamp_kernel<RefLoops>(out, x, lo, hi);
}

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  where_kernel<RefLoops>(out, cond, a, b);
}

}  // namespace kiln::backend::cpu::ref
