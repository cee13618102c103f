// CPU binary kernels (arithmetic, comparisons, fused vjps), their scalar
// forms, and where.
#include "src/ops/cpu/elementwise_loops.h"
#include "src/ops/cpu/elementwise_ops.h"
#include "src/ops/cpu/copy.h"

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
  dispatch(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = acc_t<T>;
    fn::visit_binary<T>(op, p, [&](const auto& f) {
      using O = fn::out_t<T, decltype(f), C, C>;
      binary_loop<O, T, T>(out, a, b, f);
    });
  });
}

void binary_scalar(BinaryOp op, const Tensor& out, const Tensor& a, Scalar s, bool reversed, OpParams p) {
  dispatch(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = acc_t<T>;
    const C v = s.to<C>();
    fn::visit_binary<T>(op, p, [&](const auto& f) {
      using O = fn::out_t<T, decltype(f), C, C>;
      if (reversed) unary_loop<O, T>(out, a, [f, v](C x) { return f(v, x); });
      else unary_loop<O, T>(out, a, [f, v](C x) { return f(x, v); });
    });
  });
}

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = acc_t<T>;
    ternary_loop<T, bool, T, T>(out, cond, a, b, [](bool c, C x, C y) { return c ? x : y; });
  });
}

void where_scalar(const Tensor& out, const Tensor& cond, const Tensor& x, Scalar s, bool scalar_if_true) {
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = acc_t<T>;
    const C v = s.to<C>();
    if (scalar_if_true) binary_loop<T, bool, T>(out, cond, x, [v](bool c, C y) { return c ? v : y; });
    else binary_loop<T, bool, T>(out, cond, x, [v](bool c, C y) { return c ? y : v; });
  });
}

}  // namespace kiln::cpu
