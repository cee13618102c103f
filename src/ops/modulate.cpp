// adaln_modulate and gated_residual (kiln/ops/modulate.h): checks, the fused
// kernels (backend/cpu/adaln) and their vjps. Under create_graph the vjp is
// written with differentiable kiln ops instead, so double backward works.
// Letter legend: B batch, T tokens, D features.
#include "kiln/ops/modulate.h"

#include <cmath>

#include "kiln/ops/binary.h"
#include "kiln/ops/record.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"
#include "src/backend/backend.h"
#include "src/backend/cpu/adaln/adaln.h"
#include "src/ops/checks.h"

namespace kiln {

namespace {

// x [B, T, D] and the [B, D] operands a, b: defined, one floating dtype, shapes agreeing.
void check(const char* op, const Tensor& x, const char* xn, const Tensor& a, const char* an, const Tensor& b,
           const char* bn, bool b_is_rows) {
  check_defined(op, x, xn);
  check_defined(op, a, an);
  check_defined(op, b, bn);
  backend::device_of(op, x, a, b);
  KILN_CHECK(x.dim() == 3, op, "{} {} must be 3-D [B, T, D]", xn, to_string(x.shape()));
  const int64_t B = x.size(0), D = x.size(2);
  KILN_CHECK(a.dim() == 2 && a.size(0) == B && a.size(1) == D, op, "{} {} must be [B, D] = [{}, {}] for {} {}", an,
             to_string(a.shape()), B, D, xn, to_string(x.shape()));
  if (b_is_rows)
    KILN_CHECK(b.shape() == x.shape(), op, "{} {} must have {}'s shape {}", bn, to_string(b.shape()), xn,
               to_string(x.shape()));
  else
    KILN_CHECK(b.dim() == 2 && b.size(0) == B && b.size(1) == D, op, "{} {} must be [B, D] = [{}, {}] for {} {}",
               bn, to_string(b.shape()), B, D, xn, to_string(x.shape()));
  KILN_CHECK(is_floating(x.dtype()) && a.dtype() == x.dtype() && b.dtype() == x.dtype(), op,
             "{}, {} and {} must share one floating dtype (f32, f64 or bf16), got {} {}, {} {} and {} {}", xn, an,
             bn, name(x.dtype()), to_string(x.shape()), name(a.dtype()), to_string(a.shape()), name(b.dtype()),
             to_string(b.shape()));
}

Tensor contiguous_untracked(const Tensor& t) {
  NoGradGuard g;
  return contiguous(t);
}

// A [B, D] operand as the kernels read it: a unit last stride, any row stride.
Tensor unit_rows(const Tensor& t) { return t.size(1) <= 1 || t.strides()[1] == 1 ? t : contiguous_untracked(t); }

Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }

// sum over T of [B, T, D] -> [B, D] (composed, differentiable).
Tensor sum_tokens(const Tensor& t) { return sum(t, {1}); }

}  // namespace

Tensor adaln_modulate(const Tensor& x_in, const Tensor& shift_in, const Tensor& scale_in) {
  const char* op = "adaln_modulate";
  check(op, x_in, "x", shift_in, "shift", scale_in, "scale", false);
  const Tensor x = contiguous_untracked(x_in), shift = unit_rows(shift_in), scale = unit_rows(scale_in);
  Tensor out = empty_like(x);
  KILN_LAUNCH(op, backend::cpu::adaln_modulate_forward(x, shift, scale, out));
  if (needs_grad(x_in, shift_in, scale_in))
    record(op, {x_in, shift_in, scale_in}, {out}, {x, scale}, [](const VjpArgs& a) -> Grads {
      const Tensor &x = a.saved[0], &scale = a.saved[1];
      if (GradMode::is_enabled()) {  // create_graph: the same gradients from differentiable ops
        const Tensor& g = a.grad();
        return {a.needs(0) ? mul(g, add(unsqueeze(scale, 1), 1.0)) : Tensor(),
                a.needs(1) ? sum_tokens(g) : Tensor(), a.needs(2) ? sum_tokens(mul(g, x)) : Tensor()};
      }
      const Tensor g = contiguous_untracked(a.grad());
      const int64_t B = x.size(0), D = x.size(2);
      Tensor dx = a.needs(0) ? empty_like(x) : Tensor();
      Tensor dshift = a.needs(1) ? Tensor::empty({B, D}, x.dtype(), x.device()) : Tensor();
      Tensor dscale = a.needs(2) ? Tensor::empty({B, D}, x.dtype(), x.device()) : Tensor();
      KILN_LAUNCH("adaln_modulate_backward", backend::cpu::adaln_modulate_backward(g, x, scale, dx, dshift, dscale));
      return {dx, dshift, dscale};
    });
  return out;
}

Tensor layer_norm_modulate(const Tensor& x_in, const Tensor& shift_in, const Tensor& scale_in, double eps) {
  const char* op = "layer_norm_modulate";
  check(op, x_in, "x", shift_in, "shift", scale_in, "scale", false);
  KILN_CHECK(eps >= 0 && std::isfinite(eps), op, "eps must be finite and >= 0, got {}", eps);
  const Tensor x = contiguous_untracked(x_in), shift = unit_rows(shift_in), scale = unit_rows(scale_in);
  const DType st = x.dtype() == kF64 ? kF64 : kF32;  // the statistics' dtype
  Tensor out = empty_like(x);
  Tensor mu = Tensor::empty({x.size(0), x.size(1)}, st, x.device()), rs = Tensor::empty({x.size(0), x.size(1)}, st, x.device());
  KILN_LAUNCH(op, backend::cpu::layer_norm_modulate_forward(x, shift, scale, eps, out, mu, rs));
  if (needs_grad(x_in, shift_in, scale_in))
    record(op, {x_in, shift_in, scale_in}, {out}, {x, scale, mu, rs}, [eps](const VjpArgs& a) -> Grads {
      const Tensor &x = a.saved[0], &scale = a.saved[1];
      if (GradMode::is_enabled()) {  // create_graph: the LayerNorm and modulate gradients from differentiable ops
        const Tensor& g = a.grad();
        const Tensor xc = sub(x, mean(x, {-1}, /*keepdim=*/true));
        const Tensor rstd = rsqrt(add(mean(mul(xc, xc), {-1}, /*keepdim=*/true), eps));
        const Tensor xh = mul(xc, rstd);
        Tensor dx;
        if (a.needs(0)) {
          const Tensor gy = mul(g, add(unsqueeze(scale, 1), 1.0));
          dx = mul(rstd, sub(sub(gy, mean(gy, {-1}, true)), mul(xh, mean(mul(gy, xh), {-1}, true))));
        }
        return {dx, a.needs(1) ? sum_tokens(g) : Tensor(), a.needs(2) ? sum_tokens(mul(g, xh)) : Tensor()};
      }
      const Tensor g = contiguous_untracked(a.grad());
      const int64_t B = x.size(0), D = x.size(2);
      Tensor dx = a.needs(0) ? empty_like(x) : Tensor();
      Tensor dshift = a.needs(1) ? Tensor::empty({B, D}, x.dtype(), x.device()) : Tensor();
      Tensor dscale = a.needs(2) ? Tensor::empty({B, D}, x.dtype(), x.device()) : Tensor();
      KILN_LAUNCH("layer_norm_modulate_backward", backend::cpu::layer_norm_modulate_backward(
                                                      g, x, scale, a.saved[2], a.saved[3], dx, dshift, dscale));
      return {dx, dshift, dscale};
    });
  return out;
}

Tensor gated_residual(const Tensor& x_in, const Tensor& gate_in, const Tensor& y_in) {
  const char* op = "gated_residual";
  check(op, x_in, "x", gate_in, "gate", y_in, "y", true);
  const Tensor x = contiguous_untracked(x_in), gate = unit_rows(gate_in), y = contiguous_untracked(y_in);
  Tensor out = empty_like(x);
  KILN_LAUNCH(op, backend::cpu::gated_residual_forward(x, gate, y, out));
  if (needs_grad(x_in, gate_in, y_in))
    record(op, {x_in, gate_in, y_in}, {out}, {gate, y}, [](const VjpArgs& a) -> Grads {
      const Tensor &gate = a.saved[0], &y = a.saved[1];
      const Tensor& g0 = a.grad();
      if (GradMode::is_enabled())
        return {a.needs(0) ? g0 : Tensor(), a.needs(1) ? sum_tokens(mul(g0, y)) : Tensor(),
                a.needs(2) ? mul(g0, unsqueeze(gate, 1)) : Tensor()};
      const Tensor g = contiguous_untracked(g0);
      Tensor dgate = a.needs(1) ? Tensor::empty({y.size(0), y.size(2)}, y.dtype(), y.device()) : Tensor();
      Tensor dy = a.needs(2) ? empty_like(y) : Tensor();
      KILN_LAUNCH("gated_residual_backward", backend::cpu::gated_residual_backward(g, gate, y, dgate, dy));
      return {a.needs(0) ? g0 : Tensor(), dgate, dy};  // dx is the output gradient itself
    });
  return out;
}

}  // namespace kiln
