// CPU binary kernels (arithmetic, comparisons, fused vjps), their scalar
// forms, and where, once per kernel ISA (NOTE [Per-ISA kernels] in
// CMakeLists.txt).
#include "src/backend/cpu/elementwise/elementwise_kernels.h"
#include "src/backend/cpu/elementwise/isa/elementwise.h"

namespace kiln::backend::cpu::KILN_ISA_NS {

namespace {
struct Tag {};  // this copy's own loop instantiations
using Loops = FastLoops<Tag>;
}  // namespace

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, OpParams p) {
  binary_kernel<Loops>(op, out, a, b, p);
}

void binary_scalar(BinaryOp op, const Tensor& out, const Tensor& a, Scalar s, bool reversed, OpParams p) {
  binary_scalar_kernel<Loops>(op, out, a, s, reversed, p);
}

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  where_kernel<Loops>(out, cond, a, b);
}

}  // namespace kiln::backend::cpu::KILN_ISA_NS
