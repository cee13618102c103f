// linear_gelu (kiln/ops/linear_gelu.h): the product through linear's GEMM
// (bias added by oneDNN), then one fused pass (backend/cpu/elementwise/
// gelu_fused.h) writing gelu(u) over u and gelu'(u) beside it; the vjp
// multiplies the output gradient by that derivative and sums the bias
// gradient in one pass, then runs the two products of linear's backward.
// Under create_graph the vjp recomputes u and is written with differentiable
// ops instead. Letter legend: R rows (leading dims flattened), I
// in_features, O out_features.
#include "kiln/ops/linear_gelu.h"

#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/record.h"
#include "kiln/ops/shape.h"
#include "src/backend/backend.h"
#include "src/backend/cpu/elementwise/gelu_fused.h"
#include "src/backend/cpu/linalg/matmul.h"
#include "src/ops/checks.h"

namespace kiln {

namespace {

// A view of t with new geometry that the tape does not see (kernel plumbing).
Tensor raw_view(const Tensor& t, Shape shape, Strides strides) {
  return Tensor::make_view(t.storage(), std::move(shape), std::move(strides), t.storage_offset(), t.dtype());
}

// gelu_tanh'(u) from differentiable ops (the form of gelu's own composed vjp).
Tensor gelu_tanh_grad(const Tensor& u) {
  const double k = 0.79788456080286535588, c = 0.044715;
  Tensor u2 = mul(u, u);
  Tensor t = tanh(mul(add(u, mul(mul(u2, u), c)), k));
  Tensor left = mul(add(t, 1), 0.5);
  Tensor right = mul(mul(mul(u, 0.5), rsub(mul(t, t), 1)), add(mul(u2, 3 * c * k), k));
  return add(left, right);
}

}  // namespace

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, GeluApproximation approximate) {
  const char* op = "linear_gelu";
  check_defined(op, x, "input");
  check_defined(op, weight, "weight");
  KILN_CHECK(weight.dim() == 2, op, "weight {} must be 2-D [out_features, in_features]", to_string(weight.shape()));
  KILN_CHECK(x.dim() >= 1 && x.size(x.dim() - 1) == weight.size(1), op,
             "input {} does not match weight {} (in_features {})", to_string(x.shape()), to_string(weight.shape()),
             weight.size(1));
  KILN_CHECK(is_floating(x.dtype()) && x.dtype() == weight.dtype(), op,
             "input {} {} and weight {} {} must share one floating dtype (f32, f64 or bf16)", to_string(x.shape()),
             name(x.dtype()), to_string(weight.shape()), name(weight.dtype()));
  if (bias.defined())
    KILN_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0) && bias.dtype() == x.dtype(), op,
               "bias {} {} must be [out_features = {}] of the input's dtype {}", to_string(bias.shape()),
               name(bias.dtype()), weight.size(0), name(x.dtype()));
  if (approximate != GeluApproximation::tanh) return gelu(linear(x, weight, bias), approximate);
  Tensor u;
  {
    NoGradGuard no_grad;
    u = linear(x, weight, bias);  // every argument check; [..., O], contiguous
  }
  const bool grad = needs_grad(x, weight, bias);
  // The derivative in the compute dtype: f32 for bf16 (as gelu's backward
  // computes it), the output's dtype otherwise.
  Tensor d = grad ? Tensor::empty(u.shape(), u.dtype() == kF64 ? kF64 : kF32, u.device()) : Tensor();
  KILN_LAUNCH("linear_gelu", backend::cpu::gelu_tanh_with_grad(u, u, d));  // y over u, in place
  if (!grad) return u;
  const int64_t O = weight.size(0), I = weight.size(1);
  record("linear_gelu", {x, weight, bias}, {u}, {x, weight, d, bias}, [O, I](const VjpArgs& a) -> Grads {
    const Tensor &x = a.saved[0], &w = a.saved[1], &d = a.saved[2], &b = a.saved[3];
    const Tensor& g0 = a.grad();
    if (GradMode::is_enabled()) {  // create_graph: differentiable ops, u recomputed
      Tensor gu = mul(g0, gelu_tanh_grad(linear(x, w, b)));
      return {a.needs(0) ? matmul(gu, w) : Tensor(),
              a.needs(1) ? mm(reshape(gu, {-1, O}).t(), reshape(x, {-1, I})) : Tensor(),
              a.needs(2) ? sum_to(gu, {O}) : Tensor()};
    }
    Tensor g = g0.is_contiguous() ? g0 : contiguous(g0);
    Tensor gu = Tensor::empty(g.shape(), g.dtype(), g.device());
    Tensor gb = a.needs(2) ? Tensor::empty({O}, g.dtype(), g.device()) : Tensor();
    KILN_LAUNCH("linear_gelu_backward", backend::cpu::gelu_grad_bias(g, d, gu, gb));
    const int64_t rows = O == 0 ? 0 : gu.numel() / O;
    Tensor gx, gw;
    if (a.needs(0)) {
      Shape xs = gu.shape();
      xs[xs.size() - 1] = I;
      gx = Tensor::empty(xs, gu.dtype(), gu.device());
      Tensor gu2 = raw_view(gu, {rows, O}, {O, 1}), gx2 = raw_view(gx, {rows, I}, {I, 1});
      KILN_LAUNCH("matmul", backend::cpu::matmul(gu2, w, gx2));
    }
    if (a.needs(1)) {
      if (x.is_contiguous()) {
        gw = Tensor::empty({O, I}, gu.dtype(), gu.device());
        Tensor gut = raw_view(gu, {O, rows}, {1, O}), x2 = raw_view(x, {rows, I}, {I, 1});
        KILN_LAUNCH("matmul", backend::cpu::matmul(gut, x2, gw));
      } else {
        gw = mm(reshape(gu, {-1, O}).t(), reshape(x, {-1, I}));
      }
    }
    return {gx, gw, gb};
  });
  return u;
}

}  // namespace kiln
