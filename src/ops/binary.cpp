// Binary elementwise ops: checks, type promotion, broadcasting, in-place
// forms and vjps. Kernels: src/backend/cpu/elementwise/binary.cpp.
#include "kiln/ops/binary.h"

#include <cmath>

#include "kiln/core/replay_fusion.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/promotion.h"
#include "kiln/ops/record.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"
#include "src/backend/backend.h"
#include "src/backend/cpu/copy/copy.h"
#include "src/backend/cpu/elementwise/elementwise.h"
#include "src/ops/checks.h"

namespace kiln {

using backend::cpu::BinaryOp;
using backend::cpu::OpParams;

namespace {

/// The gradient of a broadcast operand: summed to its shape, in its dtype.
Tensor reduce_grad(const Tensor& g, const Shape& shape, DType dtype) {
  Tensor r = sum_to(g, shape);
  return r.dtype() == dtype ? r : to(r, dtype);
}

/// out = op(a, b) computed in dtype ct, written as dtype ot, broadcast.
Tensor binary_forward(const char* op, BinaryOp k, const Tensor& a, const Tensor& b, DType ct, DType ot,
                      OpParams p = {}) {
  check_defined(op, a, "a");
  check_defined(op, b, "b");
  Tensor out = Tensor::empty(broadcast_shapes(op, a.shape(), b.shape()), ot, backend::device_of(op, a, b));
  if (a.dtype() == ct && b.dtype() == ct) {
    KILN_LAUNCH(op, backend::cpu::binary(k, out, a, b, p));
    if (replay::active() && ot == ct && a.shape() == out.shape() && b.shape() == out.shape())
      replay::note_binary(out, a, b);  // the memory plan's (docs/compile.md)
  } else KILN_LAUNCH(op, backend::cpu::binary(k, out, backend::cpu::convert(a, ct), backend::cpu::convert(b, ct), p));
  return out;
}

/// out = op(a, s) (or op(s, a) when reversed) in dtype ct, written as ot.
Tensor scalar_forward(const char* op, BinaryOp k, const Tensor& a, Scalar s, DType ct, DType ot,
                      bool reversed = false) {
  check_defined(op, a, "a");
  Tensor out = Tensor::empty(a.shape(), ot, a.device());
  if (a.dtype() == ct) {
    KILN_LAUNCH(op, backend::cpu::binary_scalar(k, out, a, s, reversed));
    if (replay::active() && ot == ct)  // the Fusion pass's (docs/compile.md)
      replay::note_elementwise(out, a, [k, s, reversed](const Tensor& o, const Tensor& i) {
        backend::cpu::binary_scalar(k, o, i, s, reversed);
      });
  } else {
    KILN_LAUNCH(op, backend::cpu::binary_scalar(k, out, backend::cpu::convert(a, ct), s, reversed));
  }
  return out;
}

void check_not_bool(const char* op, const Tensor& t, const char* what) {
  KILN_CHECK(t.dtype() != kBool, op, "{} of a bool tensor of shape {} is not supported; use logical_xor / logical_not",
             what, to_string(t.shape()));
}

void check_alpha(const char* op, DType result, Scalar alpha) {
  KILN_CHECK(!(alpha.is_bool() && result != kBool), op, "a bool alpha is only supported for bool results, got {}",
             name(result));
  KILN_CHECK(!(alpha.is_floating() && !is_floating(result)), op,
             "alpha {} must not be a floating-point number for a {} result", alpha.to_double(), name(result));
}

// ---- in-place support ----

/// Throws when several elements of t share one memory location (an expanded
/// tensor): writing into it would be ill-defined.
void check_no_internal_overlap(const char* op, const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d)
    KILN_CHECK(t.strides()[d] != 0 || t.shape()[d] <= 1, op,
               "more than one element of the written-to tensor of shape {} (strides {}) refers to a single "
               "memory location; clone() it first",
               to_string(t.shape()), to_string(t.strides()));
}

/// The checks every in-place binary op makes before writing into self.
void check_inplace_binary(const char* op, const Tensor& self, const Tensor& other, DType result) {
  check_defined(op, self, "self");
  check_defined(op, other, "other");
  Shape s = broadcast_shapes(op, self.shape(), other.shape());
  KILN_CHECK(s == self.shape(), op, "other of shape {} does not broadcast to self of shape {}",
             to_string(other.shape()), to_string(self.shape()));
  KILN_CHECK(can_cast(result, self.dtype()), op, "result type {} can't be cast to the desired output type {}",
             name(result), name(self.dtype()));
  check_no_internal_overlap(op, self);
  check_inplace(op, self, needs_grad(other));
}

/// other as an operand of an in-place op on self: copied when it reads
/// memory self writes at other positions.
Tensor inplace_operand(const Tensor& self, const Tensor& other) {
  if (!other.is_same_storage(self)) return other;
  if (other.data_ptr() == self.data_ptr() && other.shape() == self.shape() && other.strides() == self.strides())
    return other;
  Tensor c = Tensor::empty(other.shape(), other.dtype(), other.device());
  KILN_LAUNCH("copy", backend::cpu::copy(other, c));
  return c;
}

/// self = op(self, other) computed in ct.
void inplace_compute(BinaryOp k, const Tensor& self, const Tensor& other, DType ct, OpParams p = {}) {
  Tensor o = inplace_operand(self, other);
  if (self.dtype() == ct) {
    KILN_LAUNCH("inplace", backend::cpu::binary(k, self, self, backend::cpu::convert(o, ct), p));
  } else {
    Tensor tmp = Tensor::empty(self.shape(), ct, self.device());
    KILN_LAUNCH("inplace", backend::cpu::binary(k, tmp, backend::cpu::convert(self, ct), backend::cpu::convert(o, ct), p);
                           KILN_LAUNCH("copy", backend::cpu::copy(tmp, self)));
  }
  self.storage()->bump_version();
}

void inplace_compute(BinaryOp k, const Tensor& self, Scalar s, DType ct) {
  if (self.dtype() == ct) {
    KILN_LAUNCH("inplace", backend::cpu::binary_scalar(k, self, self, s));
  } else {
    Tensor tmp = Tensor::empty(self.shape(), ct, self.device());
    KILN_LAUNCH("inplace", backend::cpu::binary_scalar(k, tmp, backend::cpu::convert(self, ct), s);
                           KILN_LAUNCH("copy", backend::cpu::copy(tmp, self)));
  }
  self.storage()->bump_version();
}

void check_inplace_scalar(const char* op, const Tensor& self, DType result) {
  check_defined(op, self, "self");
  KILN_CHECK(can_cast(result, self.dtype()), op, "result type {} can't be cast to the desired output type {}",
             name(result), name(self.dtype()));
  check_no_internal_overlap(op, self);
  check_inplace(op, self);
}

// ---- vjps shared by the out-of-place and in-place forms ----

void record_add(const char* op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  record(op, {a, b}, {out}, {},
         [sa = a.shape(), sb = b.shape(), ta = a.dtype(), tb = b.dtype(), alpha](const VjpArgs& v) -> Grads {
           return {v.needs(0) ? reduce_grad(v.grad(), sa, ta) : Tensor(),
                   v.needs(1) ? reduce_grad(alpha == 1.0 ? v.grad() : mul(v.grad(), alpha), sb, tb) : Tensor()};
         });
}

// a_val / b_val: the values of a and b the product was computed from.
void record_mul(const char* op, const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& a_val,
                const Tensor& b_val) {
  bool ga = needs_grad(a), gb = needs_grad(b);
  record(op, {a, b}, {out}, {ga ? b_val : Tensor(), gb ? a_val : Tensor()},
         [sa = a.shape(), sb = b.shape(), ta = a.dtype(), tb = b.dtype()](const VjpArgs& v) -> Grads {
           return {v.needs(0) ? reduce_grad(mul(v.grad(), v.saved[0]), sa, ta) : Tensor(),
                   v.needs(1) ? reduce_grad(mul(v.grad(), v.saved[1]), sb, tb) : Tensor()};
         });
}

// d(a/b)/da = 1/b, d(a/b)/db = -out/b.
void record_div(const char* op, const Tensor& a, const Tensor& b, const Tensor& out) {
  record(op, {a, b}, {out}, {b, needs_grad(b) ? out : Tensor()},
         [sa = a.shape(), sb = b.shape(), ta = a.dtype(), tb = b.dtype()](const VjpArgs& v) -> Grads {
           const Tensor& bv = v.saved[0];
           return {v.needs(0) ? reduce_grad(div(v.grad(), bv), sa, ta) : Tensor(),
                   v.needs(1) ? reduce_grad(neg(div(mul(v.grad(), v.saved[1]), bv)), sb, tb) : Tensor()};
         });
}

}  // namespace

// ---- add / sub ----

Tensor add(const Tensor& a, const Tensor& b) {
  check_defined("add", a, "a");
  check_defined("add", b, "b");
  DType t = result_type(a, b);
  Tensor out = binary_forward("add", BinaryOp::add, a, b, t, t);
  if (needs_grad(a, b)) record_add("add", a, b, out, 1.0);
  return out;
}

Tensor add(const Tensor& a, const Tensor& b, Scalar alpha) {
  check_defined("add", a, "a");
  check_defined("add", b, "b");
  DType t = result_type(a, b);
  check_alpha("add", t, alpha);
  double al = alpha.to_double();
  Tensor out = binary_forward("add", BinaryOp::add, a, b, t, t, {al, 0});
  if (needs_grad(a, b)) record_add("add", a, b, out, al);
  return out;
}

Tensor add(const Tensor& a, Scalar b) {
  check_defined("add", a, "a");
  DType t = result_type(a, b);
  Tensor out = scalar_forward("add", BinaryOp::add, a, b, t, t);
  if (needs_grad(a))
    record("add", {a}, {out}, {}, [ta = a.dtype()](const VjpArgs& v) -> Grads { return {to(v.grad(), ta)}; });
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  check_defined("sub", a, "a");
  check_defined("sub", b, "b");
  check_not_bool("sub", a, "subtraction");
  check_not_bool("sub", b, "subtraction");
  DType t = result_type(a, b);
  Tensor out = binary_forward("sub", BinaryOp::sub, a, b, t, t);
  if (needs_grad(a, b)) record_add("sub", a, b, out, -1.0);
  return out;
}

Tensor sub(const Tensor& a, Scalar b) {
  check_defined("sub", a, "a");
  check_not_bool("sub", a, "subtraction");
  DType t = result_type(a, b);
  Tensor out = scalar_forward("sub", BinaryOp::sub, a, b, t, t);
  if (needs_grad(a))
    record("sub", {a}, {out}, {}, [ta = a.dtype()](const VjpArgs& v) -> Grads { return {to(v.grad(), ta)}; });
  return out;
}

Tensor rsub(const Tensor& a, Scalar b) {
  check_defined("rsub", a, "a");
  check_not_bool("rsub", a, "subtraction");
  DType t = result_type(a, b);
  Tensor out = scalar_forward("rsub", BinaryOp::sub, a, b, t, t, /*reversed=*/true);
  if (needs_grad(a))
    record("rsub", {a}, {out}, {}, [ta = a.dtype()](const VjpArgs& v) -> Grads { return {to(neg(v.grad()), ta)}; });
  return out;
}

// ---- mul / div ----

Tensor mul(const Tensor& a, const Tensor& b) {
  check_defined("mul", a, "a");
  check_defined("mul", b, "b");
  DType t = result_type(a, b);
  Tensor out = binary_forward("mul", BinaryOp::mul, a, b, t, t);
  if (needs_grad(a, b)) record_mul("mul", a, b, out, a, b);
  return out;
}

Tensor mul(const Tensor& a, Scalar b) {
  check_defined("mul", a, "a");
  DType t = result_type(a, b);
  Tensor out = scalar_forward("mul", BinaryOp::mul, a, b, t, t);
  if (needs_grad(a))
    record("mul", {a}, {out}, {}, [ta = a.dtype(), b](const VjpArgs& v) -> Grads { return {to(mul(v.grad(), b), ta)}; });
  return out;
}

namespace {
DType div_type(DType t) { return is_floating(t) ? t : kF32; }
}  // namespace

Tensor div(const Tensor& a, const Tensor& b) {
  check_defined("div", a, "a");
  check_defined("div", b, "b");
  DType t = div_type(result_type(a, b));
  Tensor out = binary_forward("div", BinaryOp::div, a, b, t, t);
  if (needs_grad(a, b)) record_div("div", a, b, out);
  return out;
}

Tensor div(const Tensor& a, Scalar b) {
  check_defined("div", a, "a");
  DType t = div_type(result_type(a, b));
  Tensor out = scalar_forward("div", BinaryOp::div, a, b, t, t);
  if (needs_grad(a))
    record("div", {a}, {out}, {}, [ta = a.dtype(), b](const VjpArgs& v) -> Grads { return {to(div(v.grad(), b), ta)}; });
  return out;
}

Tensor rdiv(const Tensor& a, Scalar b) {
  check_defined("rdiv", a, "a");
  DType t = div_type(result_type(a, b));
  Tensor out = scalar_forward("rdiv", BinaryOp::div, a, b, t, t, /*reversed=*/true);
  // d(b/a)/da = -b/a^2 = -out/a.
  if (needs_grad(a))
    record("rdiv", {a}, {out}, {a, out}, [ta = a.dtype()](const VjpArgs& v) -> Grads {
      return {to(neg(div(mul(v.grad(), v.saved[1]), v.saved[0])), ta)};
    });
  return out;
}

// ---- in place ----

Tensor add_(const Tensor& a, const Tensor& b) { return add_(a, b, 1); }

Tensor add_(const Tensor& a, const Tensor& b, Scalar alpha) {
  check_defined("add_", a, "self");
  check_defined("add_", b, "other");
  DType t = result_type(a, b);
  check_alpha("add_", t, alpha);
  check_inplace_binary("add_", a, b, t);
  double al = alpha.to_double();
  inplace_compute(BinaryOp::add, a, b, t, {al, 0});
  if (needs_grad(a, b)) record_add("add_", a, b, a, al);
  return a;
}

Tensor add_(const Tensor& a, Scalar b) {
  check_defined("add_", a, "self");
  DType t = result_type(a, b);
  check_inplace_scalar("add_", a, t);
  inplace_compute(BinaryOp::add, a, b, t);
  if (needs_grad(a)) record("add_", {a}, {a}, {}, [](const VjpArgs& v) -> Grads { return {v.grad()}; });
  return a;
}

Tensor sub_(const Tensor& a, const Tensor& b) {
  check_defined("sub_", a, "self");
  check_defined("sub_", b, "other");
  check_not_bool("sub_", a, "subtraction");
  check_not_bool("sub_", b, "subtraction");
  DType t = result_type(a, b);
  check_inplace_binary("sub_", a, b, t);
  inplace_compute(BinaryOp::sub, a, b, t);
  if (needs_grad(a, b)) record_add("sub_", a, b, a, -1.0);
  return a;
}

Tensor sub_(const Tensor& a, Scalar b) {
  check_defined("sub_", a, "self");
  check_not_bool("sub_", a, "subtraction");
  DType t = result_type(a, b);
  check_inplace_scalar("sub_", a, t);
  inplace_compute(BinaryOp::sub, a, b, t);
  if (needs_grad(a)) record("sub_", {a}, {a}, {}, [](const VjpArgs& v) -> Grads { return {v.grad()}; });
  return a;
}

Tensor mul_(const Tensor& a, const Tensor& b) {
  check_defined("mul_", a, "self");
  check_defined("mul_", b, "other");
  DType t = result_type(a, b);
  check_inplace_binary("mul_", a, b, t);
  // d/db needs the old value of a.
  Tensor a_old = needs_grad(b) ? clone(a) : Tensor();
  Tensor b_val = needs_grad(a) && b.is_same_storage(a) ? clone(b) : b;
  inplace_compute(BinaryOp::mul, a, b, t);
  if (needs_grad(a, b)) record_mul("mul_", a, b, a, a_old, b_val);
  return a;
}

Tensor mul_(const Tensor& a, Scalar b) {
  check_defined("mul_", a, "self");
  DType t = result_type(a, b);
  check_inplace_scalar("mul_", a, t);
  inplace_compute(BinaryOp::mul, a, b, t);
  if (needs_grad(a)) record("mul_", {a}, {a}, {}, [b](const VjpArgs& v) -> Grads { return {mul(v.grad(), b)}; });
  return a;
}

Tensor div_(const Tensor& a, const Tensor& b) {
  check_defined("div_", a, "self");
  check_defined("div_", b, "other");
  DType t = div_type(result_type(a, b));
  check_inplace_binary("div_", a, b, t);
  Tensor b_val = needs_grad(a, b) && b.is_same_storage(a) ? clone(b) : b;
  inplace_compute(BinaryOp::div, a, b, t);
  if (needs_grad(a, b)) record_div("div_", a, b_val, a);
  return a;
}

Tensor div_(const Tensor& a, Scalar b) {
  check_defined("div_", a, "self");
  DType t = div_type(result_type(a, b));
  check_inplace_scalar("div_", a, t);
  inplace_compute(BinaryOp::div, a, b, t);
  if (needs_grad(a)) record("div_", {a}, {a}, {}, [b](const VjpArgs& v) -> Grads { return {div(v.grad(), b)}; });
  return a;
}

Tensor fill_(const Tensor& a, Scalar value) {
  check_defined("fill_", a, "self");
  check_inplace("fill_", a);
  KILN_LAUNCH("fill_", backend::cpu::fill(a, value));
  a.storage()->bump_version();
  if (needs_grad(a)) record("fill_", {a}, {a}, {}, [](const VjpArgs& v) -> Grads { return {zeros_like(v.grad())}; });
  return a;
}

Tensor zero_(const Tensor& a) {
  check_defined("zero_", a, "self");
  check_inplace("zero_", a);
  KILN_LAUNCH("zero_", backend::cpu::fill(a, 0));
  a.storage()->bump_version();
  if (needs_grad(a)) record("zero_", {a}, {a}, {}, [](const VjpArgs& v) -> Grads { return {zeros_like(v.grad())}; });
  return a;
}

// ---- pow ----

namespace {
// d(a^e)/da = e a^(e-1), zero for e == 0 (so that 0^0 gives no NaN).
Tensor pow_grad_base(const Tensor& g, const Tensor& a, Scalar e) {
  double ev = e.to_double();
  if (ev == 0.0) return zeros_like(g);
  if (ev == 1.0) return g;
  if (ev == 2.0) return mul(g, mul(a, 2.0));
  return mul(g, mul(pow(a, Scalar(ev - 1.0)), ev));
}

void check_pow_exponent(const char* op, DType t, Scalar e) {
  KILN_CHECK(is_floating(t) || e.is_floating() || e.to_int() >= 0, op,
             "integers to negative integer powers are not allowed ({} ** {})", name(t), e.to_int());
}
}  // namespace

Tensor pow(const Tensor& a, const Tensor& b) {
  check_defined("pow", a, "a");
  check_defined("pow", b, "b");
  DType t = result_type(a, b);
  Tensor out = binary_forward("pow", BinaryOp::pow, a, b, t, t);
  if (needs_grad(a, b))
    record("pow", {a, b}, {out}, {a, b, needs_grad(b) ? out : Tensor()},
           [sa = a.shape(), sb = b.shape(), ta = a.dtype(), tb = b.dtype()](const VjpArgs& v) -> Grads {
             const Tensor &av = v.saved[0], &bv = v.saved[1];
             Tensor ga, gb;
             if (v.needs(0)) {
               // b a^(b-1), zero where b == 0 (like torch).
               Tensor d = mul(bv, pow(av, sub(bv, 1)));
               ga = reduce_grad(mul(v.grad(), masked_fill(d, eq(bv, 0), 0)), sa, ta);
             }
             if (v.needs(1)) {
               // out log(a), zero where a == 0 and b >= 0 (like torch).
               Tensor d = mul(v.saved[2], log(av));
               gb = reduce_grad(mul(v.grad(), masked_fill(d, logical_and(eq(av, 0), ge(bv, 0)), 0)), sb, tb);
             }
             return {ga, gb};
           });
  return out;
}

Tensor pow(const Tensor& a, Scalar exponent) {
  check_defined("pow", a, "a");
  DType t = result_type(a, exponent);
  check_pow_exponent("pow", t, exponent);
  Tensor out;
  if (exponent.to_double() == 2.0 && a.dtype() == t) {
    out = Tensor::empty(a.shape(), t, a.device());
    KILN_LAUNCH("unary", backend::cpu::unary(backend::cpu::UnaryOp::square, out, a));
  } else {
    out = scalar_forward("pow", BinaryOp::pow, a, exponent, t, t);
  }
  if (needs_grad(a))
    record("pow", {a}, {out}, {a}, [exponent, ta = a.dtype()](const VjpArgs& v) -> Grads {
      return {to(pow_grad_base(v.grad(), v.saved[0], exponent), ta)};
    });
  return out;
}

Tensor pow(Scalar base, const Tensor& a) {
  check_defined("pow", a, "exponent");
  DType t = result_type(a, base);
  Tensor out = scalar_forward("pow", BinaryOp::pow, a, base, t, t, /*reversed=*/true);
  if (needs_grad(a))
    record("pow", {a}, {out}, {a, out}, [base, ta = a.dtype()](const VjpArgs& v) -> Grads {
      double lb = std::log(base.to_double());
      Tensor d = mul(v.grad(), mul(v.saved[1], lb));
      // 0 ** e has zero gradient for e >= 0 (like torch).
      if (base.to_double() == 0.0) d = masked_fill(d, ge(v.saved[0], 0), 0);
      return {to(d, ta)};
    });
  return out;
}

Tensor pow_(const Tensor& a, Scalar exponent) {
  check_defined("pow_", a, "self");
  DType t = result_type(a, exponent);
  check_pow_exponent("pow_", t, exponent);
  check_inplace_scalar("pow_", a, t);
  Tensor a_old = needs_grad(a) ? clone(a) : Tensor();
  if (exponent.to_double() == 2.0 && a.dtype() == t) {
    KILN_LAUNCH("unary", backend::cpu::unary(backend::cpu::UnaryOp::square, a, a));
    a.storage()->bump_version();
  } else {
    inplace_compute(BinaryOp::pow, a, exponent, t);
  }
  if (needs_grad(a))
    record("pow_", {a}, {a}, {a_old}, [exponent](const VjpArgs& v) -> Grads {
      return {pow_grad_base(v.grad(), v.saved[0], exponent)};
    });
  return a;
}

// ---- maximum / minimum ----

namespace {
// The gradient of max(a, b) goes to the larger input, half to each on ties;
// `loses` is a < b for maximum, a > b for minimum.
Tensor minmax(const char* op, BinaryOp k, const Tensor& a, const Tensor& b) {
  check_defined(op, a, "a");
  check_defined(op, b, "b");
  DType t = result_type(a, b);
  Tensor out = binary_forward(op, k, a, b, t, t);
  if (needs_grad(a, b))
    record(op, {a, b}, {out}, {a, b},
           [k, sa = a.shape(), sb = b.shape(), ta = a.dtype(), tb = b.dtype()](const VjpArgs& v) -> Grads {
             const Tensor &av = v.saved[0], &bv = v.saved[1];
             Tensor half = where(eq(av, bv), mul(v.grad(), 0.5), v.grad());
             bool is_max = k == BinaryOp::maximum;
             return {v.needs(0) ? reduce_grad(masked_fill(half, is_max ? lt(av, bv) : gt(av, bv), 0), sa, ta) : Tensor(),
                     v.needs(1) ? reduce_grad(masked_fill(half, is_max ? gt(av, bv) : lt(av, bv), 0), sb, tb) : Tensor()};
           });
  return out;
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return minmax("maximum", BinaryOp::maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return minmax("minimum", BinaryOp::minimum, a, b); }

// ---- comparisons and logic ----

namespace {
Tensor compare(const char* op, BinaryOp k, const Tensor& a, const Tensor& b) {
  check_defined(op, a, "a");
  check_defined(op, b, "b");
  return binary_forward(op, k, a, b, result_type(a, b), kBool);
}
Tensor compare(const char* op, BinaryOp k, const Tensor& a, Scalar b) {
  check_defined(op, a, "a");
  return scalar_forward(op, k, a, b, result_type(a, b), kBool);
}
}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return compare("eq", BinaryOp::eq, a, b); }
Tensor eq(const Tensor& a, Scalar b) { return compare("eq", BinaryOp::eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare("ne", BinaryOp::ne, a, b); }
Tensor ne(const Tensor& a, Scalar b) { return compare("ne", BinaryOp::ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare("lt", BinaryOp::lt, a, b); }
Tensor lt(const Tensor& a, Scalar b) { return compare("lt", BinaryOp::lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare("le", BinaryOp::le, a, b); }
Tensor le(const Tensor& a, Scalar b) { return compare("le", BinaryOp::le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare("gt", BinaryOp::gt, a, b); }
Tensor gt(const Tensor& a, Scalar b) { return compare("gt", BinaryOp::gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare("ge", BinaryOp::ge, a, b); }
Tensor ge(const Tensor& a, Scalar b) { return compare("ge", BinaryOp::ge, a, b); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return compare("logical_and", BinaryOp::logical_and, a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return compare("logical_or", BinaryOp::logical_or, a, b); }
Tensor logical_xor(const Tensor& a, const Tensor& b) { return compare("logical_xor", BinaryOp::logical_xor, a, b); }

Tensor logical_not(const Tensor& a) {
  check_defined("logical_not", a, "a");
  Tensor out = Tensor::empty(a.shape(), kBool, a.device());
  KILN_LAUNCH("unary", backend::cpu::unary(backend::cpu::UnaryOp::logical_not, out, a));
  return out;
}

Tensor isclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  check_defined("isclose", a, "a");
  check_defined("isclose", b, "b");
  KILN_CHECK(rtol >= 0 && atol >= 0, "isclose", "rtol ({}) and atol ({}) must be non-negative", rtol, atol);
  return binary_forward("isclose", BinaryOp::isclose, a, b, result_type(a, b), kBool, {rtol, atol});
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  check_defined("allclose", a, "a");
  check_defined("allclose", b, "b");
  KILN_CHECK(rtol >= 0 && atol >= 0, "allclose", "rtol ({}) and atol ({}) must be non-negative", rtol, atol);
  Tensor c = binary_forward("allclose", BinaryOp::isclose, a, b, result_type(a, b), kBool, {rtol, atol});
  const bool* p = c.data<bool>();  // fresh and contiguous
  for (int64_t i = 0, n = c.numel(); i < n; ++i)
    if (!p[i]) return false;
  return true;
}

Tensor isnan(const Tensor& a) {
  check_defined("isnan", a, "a");
  Tensor out = Tensor::empty(a.shape(), kBool, a.device());
  KILN_LAUNCH("unary", backend::cpu::unary(backend::cpu::UnaryOp::isnan, out, a));
  return out;
}

Tensor isfinite(const Tensor& a) {
  check_defined("isfinite", a, "a");
  Tensor out = Tensor::empty(a.shape(), kBool, a.device());
  KILN_LAUNCH("unary", backend::cpu::unary(backend::cpu::UnaryOp::isfinite, out, a));
  return out;
}

// ---- selection ----

namespace {
void check_cond(const char* op, const Tensor& cond, const char* arg) {
  check_defined(op, cond, arg);
  KILN_CHECK(cond.dtype() == kBool, op, "{} must be a bool tensor, got {} of shape {}", arg, name(cond.dtype()),
             to_string(cond.shape()));
}
}  // namespace

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_cond("where", cond, "condition");
  check_defined("where", a, "a");
  check_defined("where", b, "b");
  DType t = result_type(a, b);
  Shape s = broadcast_shapes("where", broadcast_shapes("where", cond.shape(), a.shape()), b.shape());
  Tensor out = Tensor::empty(s, t, a.device());
  KILN_LAUNCH("where", backend::cpu::where(out, cond, backend::cpu::convert(a, t), backend::cpu::convert(b, t)));
  if (needs_grad(a, b))
    record("where", {a, b}, {out}, {cond},
           [sa = a.shape(), sb = b.shape(), ta = a.dtype(), tb = b.dtype()](const VjpArgs& v) -> Grads {
             const Tensor& c = v.saved[0];
             return {v.needs(0) ? reduce_grad(where(c, v.grad(), 0), sa, ta) : Tensor(),
                     v.needs(1) ? reduce_grad(where(c, 0, v.grad()), sb, tb) : Tensor()};
           });
  return out;
}

namespace {
// cond ? s : x (scalar_if_true) or cond ? x : s, in dtype t.
Tensor where_scalar(const char* op, const Tensor& cond, const Tensor& x, Scalar s, bool scalar_if_true, DType t) {
  Tensor out = Tensor::empty(broadcast_shapes(op, cond.shape(), x.shape()), t, x.device());
  KILN_LAUNCH("where_scalar", backend::cpu::where_scalar(out, cond, backend::cpu::convert(x, t), s, scalar_if_true));
  if (needs_grad(x))
    record(op, {x}, {out}, {cond}, [sx = x.shape(), tx = x.dtype(), scalar_if_true](const VjpArgs& v) -> Grads {
      const Tensor& c = v.saved[0];
      return {reduce_grad(scalar_if_true ? where(c, 0, v.grad()) : where(c, v.grad(), 0), sx, tx)};
    });
  return out;
}
}  // namespace

Tensor where(const Tensor& cond, const Tensor& a, Scalar b) {
  check_cond("where", cond, "condition");
  check_defined("where", a, "a");
  return where_scalar("where", cond, a, b, false, result_type(a, b));
}

Tensor where(const Tensor& cond, Scalar a, const Tensor& b) {
  check_cond("where", cond, "condition");
  check_defined("where", b, "b");
  return where_scalar("where", cond, b, a, true, result_type(b, a));
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value) {
  check_defined("masked_fill", x, "x");
  check_cond("masked_fill", mask, "mask");
  return where_scalar("masked_fill", mask, x, value, true, x.dtype());
}

Tensor masked_fill_(const Tensor& x, const Tensor& mask, Scalar value) {
  check_defined("masked_fill_", x, "self");
  check_cond("masked_fill_", mask, "mask");
  Shape s = broadcast_shapes("masked_fill_", x.shape(), mask.shape());
  KILN_CHECK(s == x.shape(), "masked_fill_", "mask of shape {} does not broadcast to self of shape {}",
             to_string(mask.shape()), to_string(x.shape()));
  check_no_internal_overlap("masked_fill_", x);
  check_inplace("masked_fill_", x);
  Tensor m = inplace_operand(x, mask);
  KILN_LAUNCH("where_scalar", backend::cpu::where_scalar(x, m, x, value, true));
  x.storage()->bump_version();
  if (needs_grad(x))
    record("masked_fill_", {x}, {x}, {m}, [](const VjpArgs& v) -> Grads { return {where(v.saved[0], 0, v.grad())}; });
  return x;
}

}  // namespace kiln
