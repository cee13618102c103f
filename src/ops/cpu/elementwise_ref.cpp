// The plain reference versions of the elementwise kernels: the same functors
// applied element by element with index arithmetic.
#include "src/ops/cpu/elementwise_loops.h"
#include "src/ops/cpu/elementwise_ops.h"

namespace kiln::cpu::ref {

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

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = acc_t<T>;
    ternary_loop<T, bool, T, T>(out, cond, a, b, [](bool c, C x, C y) { return c ? x : y; });
  });
}

}  // namespace kiln::cpu::ref
