// CPU unary kernels (math, activations, predicates) and clamp.
#include "src/ops/cpu/elementwise_loops.h"
#include "src/ops/cpu/elementwise_ops.h"

namespace kiln::cpu {

void unary(UnaryOp op, const Tensor& out, const Tensor& x, OpParams p) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = acc_t<T>;
    fn::visit_unary<T>(op, p, [&](const auto& f) {
      using O = fn::out_t<T, decltype(f), C>;
      unary_loop<O, T>(out, x, f);
    });
  });
}

void clamp(const Tensor& out, const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    unary_loop<T, T>(out, x, fn::make_clamp<T>(lo, hi));
  });
}

}  // namespace kiln::cpu
