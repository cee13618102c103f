// Unary elementwise ops and activations: checks, dtype rules and vjps.
// Kernels: src/ops/cpu/unary.cpp.
#include "kiln/ops/unary.h"

#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/record.h"
#include "src/ops/cpu/elementwise.h"

namespace kiln {

using cpu::OpParams;
using cpu::UnaryOp;

namespace {

/// out = op(x) in dtype t (x converted when needed).
Tensor unary_forward(const char* op, UnaryOp k, const Tensor& x, DType t, OpParams p = {}) {
  KILN_CHECK(x.defined(), op, "x is an undefined tensor");
  Tensor out = Tensor::empty(x.shape(), t, x.device());
  if (x.dtype() == t) cpu::unary(k, out, x, p);
  else cpu::unary(k, out, cpu::convert(x, t), p);
  return out;
}

}  // namespace

Tensor neg(const Tensor& x) {
  KILN_CHECK(x.defined(), "neg", "x is an undefined tensor");
  KILN_CHECK(x.dtype() != kBool, "neg", "negation of a bool tensor of shape {} is not supported; use logical_not",
             to_string(x.shape()));
  Tensor out = unary_forward("neg", UnaryOp::neg, x, x.dtype());
  if (needs_grad(x)) record("neg", {x}, {out}, {}, [](const VjpArgs& v) -> Grads { return {neg(v.grad())}; });
  return out;
}

Tensor operator-(const Tensor& a) { return neg(a); }

}  // namespace kiln
