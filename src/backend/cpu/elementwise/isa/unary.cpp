// CPU unary kernels (math, activations, predicates) and clamp, once per
// kernel ISA (NOTE [Per-ISA kernels] in CMakeLists.txt).
#include "src/backend/cpu/elementwise/elementwise_kernels.h"
#include "src/backend/cpu/elementwise/isa/elementwise.h"

namespace kiln::backend::cpu::KILN_ISA_NS {

namespace {
struct Tag {};  // this copy's own loop instantiations
using Loops = FastLoops<Tag>;
}  // namespace

void unary(UnaryOp op, const Tensor& out, const Tensor& x, OpParams p) { unary_kernel<Loops>(op, out, x, p); }

void clamp(const Tensor& out, const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  clamp_kernel<Loops>(out, x, lo, hi);
}

}  // namespace kiln::backend::cpu::KILN_ISA_NS
