// Unary elementwise ops and activations: checks, dtype rules and vjps.
// Kernels: src/backend/cpu/elementwise/unary.cpp.
#include "kiln/ops/unary.h"

#include <cmath>

#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/promotion.h"
#include "kiln/core/replay_fusion.h"
#include "kiln/ops/record.h"
#include "kiln/ops/shape.h"
#include "src/backend/cpu/elementwise/elementwise.h"
#include "src/ops/checks.h"

namespace kiln {

using backend::cpu::OpParams;
using backend::cpu::UnaryOp;

namespace {

/// out = op(x) in dtype t (x converted when needed).
Tensor unary_forward(const char* op, UnaryOp k, const Tensor& x, DType t, OpParams p = {}) {
  check_defined(op, x, "x");
  Tensor out = Tensor::empty(x.shape(), t, x.device());
  if (x.dtype() == t) {
    KILN_LAUNCH(op, backend::cpu::unary(k, out, x, p));
    if (replay::active())  // the Fusion pass's (docs/compile.md)
      replay::note_elementwise(out, x, [k, p](const Tensor& o, const Tensor& i) { backend::cpu::unary(k, o, i, p); });
  } else {
    KILN_LAUNCH(op, backend::cpu::unary(k, out, backend::cpu::convert(x, t), p));
  }
  return out;
}

/// Float functions: integer and bool inputs compute in f32.
DType float_type(DType t) { return is_floating(t) ? t : kF32; }

Tensor float_forward(const char* op, UnaryOp k, const Tensor& x, OpParams p = {}) {
  check_defined(op, x, "x");
  return unary_forward(op, k, x, float_type(x.dtype()), p);
}

/// g * f'(s) through the fused kernel `k`, or through `composed` (written
/// with differentiable ops) when the gradient itself must be differentiable
/// (create_graph).
template <class Composed>
Tensor fused_backward(backend::cpu::BinaryOp k, const Tensor& g, const Tensor& s, OpParams p, Composed composed) {
  if (needs_grad(g, s) || g.dtype() != s.dtype()) return composed();
  Tensor out = Tensor::empty(g.shape(), g.dtype(), g.device());
  KILN_LAUNCH("binary", backend::cpu::binary(k, out, g, s, p));
  if (replay::active() && g.shape() == s.shape()) replay::note_binary(out, g, s);  // the memory plan's
  return out;
}

/// Records a vjp that is zero everywhere (sign, floor, ceil, round).
void record_zero_grad(const char* op, const Tensor& x, const Tensor& out) {
  if (needs_grad(x)) record(op, {x}, {out}, {}, [](const VjpArgs& v) -> Grads { return {zeros_like(v.grad())}; });
}

void check_inplace_unary(const char* op, const Tensor& x, DType result) {
  check_defined(op, x, "self");
  KILN_CHECK(can_cast(result, x.dtype()), op, "result type {} can't be cast to the desired output type {}",
             name(result), name(x.dtype()));
  for (int64_t d = 0; d < x.dim(); ++d)
    KILN_CHECK(x.strides()[d] != 0 || x.shape()[d] <= 1, op,
               "more than one element of the written-to tensor of shape {} (strides {}) refers to a single "
               "memory location; clone() it first",
               to_string(x.shape()), to_string(x.strides()));
  check_inplace(op, x);
}

}  // namespace

// ---- vjp helpers (fused kernels; composed ops under create_graph) ----

namespace {
Tensor tanh_backward(const Tensor& g, const Tensor& y) {
  return fused_backward(backend::cpu::BinaryOp::tanh_backward, g, y, {}, [&] { return mul(g, rsub(mul(y, y), 1)); });
}
Tensor sigmoid_backward(const Tensor& g, const Tensor& y) {
  return fused_backward(backend::cpu::BinaryOp::sigmoid_backward, g, y, {}, [&] { return mul(mul(g, y), rsub(y, 1)); });
}
Tensor sqrt_backward(const Tensor& g, const Tensor& y) {
  return fused_backward(backend::cpu::BinaryOp::sqrt_backward, g, y, {}, [&] { return div(g, mul(y, 2)); });
}
Tensor relu_backward(const Tensor& g, const Tensor& y) {
  return fused_backward(backend::cpu::BinaryOp::relu_backward, g, y, {}, [&] { return where(gt(y, 0), g, 0); });
}
Tensor clamp_backward(const Tensor& g, const Tensor& mask) { return where(mask, g, 0); }

/// Where min <= x <= max (either bound may be absent): clamp passes the gradient.
Tensor clamp_mask(const Tensor& x, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi) {
  NoGradGuard no_grad;
  if (lo && hi) return logical_and(ge(x, *lo), le(x, *hi));
  if (lo) return ge(x, *lo);
  return le(x, *hi);
}
}  // namespace

// ---- ops ----

Tensor neg(const Tensor& x) {
  check_defined("neg", x, "x");
  KILN_CHECK(x.dtype() != kBool, "neg", "negation of a bool tensor of shape {} is not supported; use logical_not",
             to_string(x.shape()));
  Tensor out = unary_forward("neg", UnaryOp::neg, x, x.dtype());
  if (needs_grad(x)) record("neg", {x}, {out}, {}, [](const VjpArgs& v) -> Grads { return {neg(v.grad())}; });
  return out;
}

Tensor operator-(const Tensor& a) { return neg(a); }

Tensor abs(const Tensor& x) {
  check_defined("abs", x, "x");
  Tensor out = unary_forward("abs", UnaryOp::abs, x, x.dtype());
  if (needs_grad(x))
    record("abs", {x}, {out}, {x}, [](const VjpArgs& v) -> Grads { return {mul(v.grad(), sign(v.saved[0]))}; });
  return out;
}

Tensor exp(const Tensor& x) {
  Tensor out = float_forward("exp", UnaryOp::exp, x);
  if (needs_grad(x)) record("exp", {x}, {out}, {out}, [](const VjpArgs& v) -> Grads { return {mul(v.grad(), v.saved[0])}; });
  return out;
}

Tensor log(const Tensor& x) {
  Tensor out = float_forward("log", UnaryOp::log, x);
  if (needs_grad(x)) record("log", {x}, {out}, {x}, [](const VjpArgs& v) -> Grads { return {div(v.grad(), v.saved[0])}; });
  return out;
}

Tensor log1p(const Tensor& x) {
  Tensor out = float_forward("log1p", UnaryOp::log1p, x);
  if (needs_grad(x))
    record("log1p", {x}, {out}, {x}, [](const VjpArgs& v) -> Grads { return {div(v.grad(), add(v.saved[0], 1))}; });
  return out;
}

Tensor expm1(const Tensor& x) {
  Tensor out = float_forward("expm1", UnaryOp::expm1, x);
  if (needs_grad(x))
    record("expm1", {x}, {out}, {out}, [](const VjpArgs& v) -> Grads { return {mul(v.grad(), add(v.saved[0], 1))}; });
  return out;
}

Tensor sqrt(const Tensor& x) {
  Tensor out = float_forward("sqrt", UnaryOp::sqrt, x);
  if (needs_grad(x))
    record("sqrt", {x}, {out}, {out}, [](const VjpArgs& v) -> Grads { return {sqrt_backward(v.grad(), v.saved[0])}; });
  return out;
}

Tensor rsqrt(const Tensor& x) {
  Tensor out = float_forward("rsqrt", UnaryOp::rsqrt, x);
  // d x^(-1/2) = -x^(-3/2) / 2 = -out^3 / 2.
  if (needs_grad(x))
    record("rsqrt", {x}, {out}, {out}, [](const VjpArgs& v) -> Grads {
      const Tensor& y = v.saved[0];
      return {mul(v.grad(), mul(mul(y, y), mul(y, -0.5)))};
    });
  return out;
}

Tensor square(const Tensor& x) { return pow(x, 2); }

Tensor reciprocal(const Tensor& x) {
  Tensor out = float_forward("reciprocal", UnaryOp::reciprocal, x);
  // d(1/x) = -1/x^2 = -out^2.
  if (needs_grad(x))
    record("reciprocal", {x}, {out}, {out}, [](const VjpArgs& v) -> Grads {
      const Tensor& y = v.saved[0];
      return {mul(v.grad(), neg(mul(y, y)))};
    });
  return out;
}

Tensor sin(const Tensor& x) {
  Tensor out = float_forward("sin", UnaryOp::sin, x);
  if (needs_grad(x)) record("sin", {x}, {out}, {x}, [](const VjpArgs& v) -> Grads { return {mul(v.grad(), cos(v.saved[0]))}; });
  return out;
}

Tensor cos(const Tensor& x) {
  Tensor out = float_forward("cos", UnaryOp::cos, x);
  if (needs_grad(x))
    record("cos", {x}, {out}, {x}, [](const VjpArgs& v) -> Grads { return {mul(v.grad(), neg(sin(v.saved[0])))}; });
  return out;
}

Tensor tanh(const Tensor& x) {
  Tensor out = float_forward("tanh", UnaryOp::tanh, x);
  if (needs_grad(x))
    record("tanh", {x}, {out}, {out}, [](const VjpArgs& v) -> Grads { return {tanh_backward(v.grad(), v.saved[0])}; });
  return out;
}

Tensor sigmoid(const Tensor& x) {
  Tensor out = float_forward("sigmoid", UnaryOp::sigmoid, x);
  if (needs_grad(x))
    record("sigmoid", {x}, {out}, {out}, [](const VjpArgs& v) -> Grads { return {sigmoid_backward(v.grad(), v.saved[0])}; });
  return out;
}

Tensor erf(const Tensor& x) {
  Tensor out = float_forward("erf", UnaryOp::erf, x);
  // d erf(x) = 2 / sqrt(pi) exp(-x^2).
  if (needs_grad(x))
    record("erf", {x}, {out}, {x}, [](const VjpArgs& v) -> Grads {
      const Tensor& xv = v.saved[0];
      return {mul(v.grad(), mul(exp(neg(mul(xv, xv))), 1.1283791670955126))};
    });
  return out;
}

Tensor relu(const Tensor& x) {
  check_defined("relu", x, "x");
  Tensor out = unary_forward("relu", UnaryOp::relu, x, x.dtype());
  if (needs_grad(x))
    record("relu", {x}, {out}, {out}, [](const VjpArgs& v) -> Grads { return {relu_backward(v.grad(), v.saved[0])}; });
  return out;
}

Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  bool tanh_form = approximate == GeluApproximation::tanh;
  Tensor out = float_forward("gelu", tanh_form ? UnaryOp::gelu_tanh : UnaryOp::gelu, x);
  if (needs_grad(x))
    record("gelu", {x}, {out}, {x}, [tanh_form](const VjpArgs& v) -> Grads {
      const Tensor &g = v.grad(), &xv = v.saved[0];
      if (tanh_form)
        return {fused_backward(backend::cpu::BinaryOp::gelu_tanh_backward, g, xv, {}, [&] {
          // 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2), t = tanh(k (x + c x^3)).
          const double k = 0.79788456080286535588, c = 0.044715;
          Tensor x2 = mul(xv, xv);
          Tensor t = tanh(mul(add(xv, mul(mul(x2, xv), c)), k));
          Tensor left = mul(add(t, 1), 0.5);
          Tensor right = mul(mul(mul(xv, 0.5), rsub(mul(t, t), 1)), add(mul(x2, 3 * c * k), k));
          return mul(g, add(left, right));
        })};
      return {fused_backward(backend::cpu::BinaryOp::gelu_backward, g, xv, {}, [&] {
        // Phi(x) + x phi(x).
        Tensor cdf = mul(add(erf(mul(xv, 0.70710678118654752440)), 1), 0.5);
        Tensor pdf = mul(exp(mul(mul(xv, xv), -0.5)), 0.39894228040143267794);
        return mul(g, add(cdf, mul(xv, pdf)));
      })};
    });
  return out;
}

Tensor silu(const Tensor& x) {
  Tensor out = float_forward("silu", UnaryOp::silu, x);
  if (needs_grad(x))
    record("silu", {x}, {out}, {x}, [](const VjpArgs& v) -> Grads {
      const Tensor &g = v.grad(), &xv = v.saved[0];
      return {fused_backward(backend::cpu::BinaryOp::silu_backward, g, xv, {}, [&] {
        // s (1 + x (1 - s)), s = sigmoid(x).
        Tensor s = sigmoid(xv);
        return mul(g, mul(s, add(mul(xv, rsub(s, 1)), 1)));
      })};
    });
  return out;
}

Tensor softplus(const Tensor& x, double beta, double threshold) {
  KILN_CHECK(beta != 0, "softplus", "beta must be nonzero");
  Tensor out = float_forward("softplus", UnaryOp::softplus, x, {beta, threshold});
  if (needs_grad(x))
    record("softplus", {x}, {out}, {x}, [beta, threshold](const VjpArgs& v) -> Grads {
      const Tensor &g = v.grad(), &xv = v.saved[0];
      return {fused_backward(backend::cpu::BinaryOp::softplus_backward, g, xv, {beta, threshold}, [&] {
        // sigmoid(beta x), 1 above the threshold.
        Tensor bx = mul(xv, beta);
        return where(gt(bx, threshold), g, mul(g, sigmoid(bx)));
      })};
    });
  return out;
}

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  Tensor out = float_forward("leaky_relu", UnaryOp::leaky_relu, x, {negative_slope, 0});
  if (needs_grad(x))
    record("leaky_relu", {x}, {out}, {x}, [negative_slope](const VjpArgs& v) -> Grads {
      const Tensor &g = v.grad(), &xv = v.saved[0];
      return {fused_backward(backend::cpu::BinaryOp::leaky_relu_backward, g, xv, {negative_slope, 0},
                             [&] { return where(gt(xv, 0), g, mul(g, negative_slope)); })};
    });
  return out;
}

Tensor sign(const Tensor& x) {
  check_defined("sign", x, "x");
  Tensor out = unary_forward("sign", UnaryOp::sign, x, x.dtype());
  record_zero_grad("sign", x, out);
  return out;
}

Tensor floor(const Tensor& x) {
  check_defined("floor", x, "x");
  Tensor out = unary_forward("floor", UnaryOp::floor, x, x.dtype());
  record_zero_grad("floor", x, out);
  return out;
}

Tensor ceil(const Tensor& x) {
  check_defined("ceil", x, "x");
  Tensor out = unary_forward("ceil", UnaryOp::ceil, x, x.dtype());
  record_zero_grad("ceil", x, out);
  return out;
}

Tensor round(const Tensor& x) {
  check_defined("round", x, "x");
  Tensor out = unary_forward("round", UnaryOp::round, x, x.dtype());
  record_zero_grad("round", x, out);
  return out;
}

Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  check_defined("clamp", x, "x");
  KILN_CHECK(min || max, "clamp", "at least one of min and max must be given");
  DType t = min && max ? result_type(x, *min, *max) : result_type(x, min ? *min : *max);
  Tensor out = Tensor::empty(x.shape(), t, x.device());
  KILN_LAUNCH("clamp", backend::cpu::clamp(out, backend::cpu::convert(x, t), min, max));
  if (needs_grad(x))
    record("clamp", {x}, {out}, {clamp_mask(x, min, max)}, [tx = x.dtype()](const VjpArgs& v) -> Grads {
      return {to(clamp_backward(v.grad(), v.saved[0]), tx)};
    });
  return out;
}

Tensor clamp_min(const Tensor& x, Scalar min) { return clamp(x, min, std::nullopt); }
Tensor clamp_max(const Tensor& x, Scalar max) { return clamp(x, std::nullopt, max); }

// ---- in place ----

Tensor neg_(const Tensor& x) {
  check_defined("neg_", x, "self");
  KILN_CHECK(x.dtype() != kBool, "neg_", "negation of a bool tensor of shape {} is not supported; use logical_not",
             to_string(x.shape()));
  check_inplace_unary("neg_", x, x.dtype());
  KILN_LAUNCH("unary", backend::cpu::unary(UnaryOp::neg, x, x));
  x.storage()->bump_version();
  if (needs_grad(x)) record("neg_", {x}, {x}, {}, [](const VjpArgs& v) -> Grads { return {neg(v.grad())}; });
  return x;
}

Tensor exp_(const Tensor& x) {
  check_defined("exp_", x, "self");
  check_inplace_unary("exp_", x, float_type(x.dtype()));
  KILN_LAUNCH("unary", backend::cpu::unary(UnaryOp::exp, x, x));
  x.storage()->bump_version();
  if (needs_grad(x)) record("exp_", {x}, {x}, {x}, [](const VjpArgs& v) -> Grads { return {mul(v.grad(), v.saved[0])}; });
  return x;
}

Tensor sqrt_(const Tensor& x) {
  check_defined("sqrt_", x, "self");
  check_inplace_unary("sqrt_", x, float_type(x.dtype()));
  KILN_LAUNCH("unary", backend::cpu::unary(UnaryOp::sqrt, x, x));
  x.storage()->bump_version();
  if (needs_grad(x))
    record("sqrt_", {x}, {x}, {x}, [](const VjpArgs& v) -> Grads { return {sqrt_backward(v.grad(), v.saved[0])}; });
  return x;
}

Tensor relu_(const Tensor& x) {
  check_defined("relu_", x, "self");
  check_inplace_unary("relu_", x, x.dtype());
  KILN_LAUNCH("unary", backend::cpu::unary(UnaryOp::relu, x, x));
  x.storage()->bump_version();
  if (needs_grad(x))
    record("relu_", {x}, {x}, {x}, [](const VjpArgs& v) -> Grads { return {relu_backward(v.grad(), v.saved[0])}; });
  return x;
}

Tensor clamp_(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  check_defined("clamp_", x, "self");
  KILN_CHECK(min || max, "clamp_", "at least one of min and max must be given");
  DType t = min && max ? result_type(x, *min, *max) : result_type(x, min ? *min : *max);
  check_inplace_unary("clamp_", x, t);
  Tensor mask = needs_grad(x) ? clamp_mask(x, min, max) : Tensor();
  KILN_LAUNCH("clamp", backend::cpu::clamp(x, x, min, max));
  x.storage()->bump_version();
  if (needs_grad(x))
    record("clamp_", {x}, {x}, {mask}, [](const VjpArgs& v) -> Grads { return {clamp_backward(v.grad(), v.saved[0])}; });
  return x;
}

}  // namespace kiln
