// layer_norm, rms_norm and batch_norm: argument checks, the fused CPU kernels
// (src/backend/cpu/nn/norm.cpp) and their vjps. The vjps run the fused backward
// kernel; when grad mode is on during backward (create_graph), they instead
// compose kiln ops that recompute the statistics from x, so higher
// derivatives are exact.
#include "kiln/ops/norm.h"

#include <cmath>

#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/record.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"
#include "src/backend/backend.h"
#include "src/backend/cpu/nn/norm.h"
#include "src/ops/checks.h"

namespace kiln {

namespace {

// Statistics dtype: f32 for bf16/f32, f64 for f64.
DType stat_dtype(DType t) { return t == kF64 ? kF64 : kF32; }

Tensor contiguous_nograd(const Tensor& t) {
  if (!t.defined()) return t;
  NoGradGuard no_grad;
  return contiguous(t);
}

Shape range_dims(int64_t lo, int64_t hi) {
  Shape d;
  for (int64_t i = lo; i < hi; ++i) d.push_back(i);
  return d;
}

// Sum over `dims`, or x itself when there are none (sum with no dims would
// reduce everything).
Tensor sum_over(const Tensor& x, const Shape& dims) { return dims.empty() ? x : sum(x, dims); }

void check_param(const char* op, const char* what, const Tensor& p, const Shape& want, const Tensor& x) {
  if (!p.defined()) return;
  KILN_CHECK(p.shape() == want, op, "{} of shape {} does not match {} (input {})", what, to_string(p.shape()),
             to_string(want), to_string(x.shape()));
  KILN_CHECK(p.dtype() == x.dtype(), op, "{} has dtype {} but input has dtype {}", what, name(p.dtype()),
             name(x.dtype()));
}

// ---- layer norm and rms norm ----

Tensor layer_norm_impl(const char* op, const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                       const Tensor& bias, double eps, bool rms) {
  check_defined(op, x);
  backend::device_of(op, x, weight, bias);
  KILN_CHECK(is_floating(x.dtype()), op, "expects a floating input (f32, f64, bf16), got {} {}", name(x.dtype()),
             to_string(x.shape()));
  const int64_t k = int64_t(normalized_shape.size());
  KILN_CHECK(k >= 1, op, "normalized_shape must have at least one dim, got []");
  bool match = k <= x.dim();
  for (int64_t i = 0; match && i < k; ++i) match = x.size(x.dim() - k + i) == normalized_shape[size_t(i)];
  KILN_CHECK(match, op, "normalized_shape {} does not match the trailing dims of input {}",
             to_string(normalized_shape), to_string(x.shape()));
  const int64_t N = numel(normalized_shape);
  KILN_CHECK(N > 0, op, "normalized_shape {} has no elements", to_string(normalized_shape));
  check_param(op, "weight", weight, normalized_shape, x);
  check_param(op, "bias", bias, normalized_shape, x);
  KILN_CHECK(eps >= 0 && std::isfinite(eps), op, "eps must be finite and >= 0, got {}", eps);

  const int64_t M = x.numel() / N;
  const DType sd = stat_dtype(x.dtype());
  Tensor xc = contiguous_nograd(x), wc = contiguous_nograd(weight), bc = contiguous_nograd(bias);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor mean = rms ? Tensor() : Tensor::empty({M}, sd, x.device());
  Tensor rstd = Tensor::empty({M}, sd, x.device());
  KILN_LAUNCH("layer_norm", backend::cpu::layer_norm(xc, wc, bc, eps, rms, out, mean, rstd));

  if (needs_grad(x, weight, bias)) {
    record(op, {x, weight, bias}, {out}, {x, weight, mean, rstd}, [rms, eps, k, norm_shape = normalized_shape](const VjpArgs& a) -> Grads {
      const Tensor& x = a.saved[0];
      const Tensor& w = a.saved[1];
      const Tensor& g = a.grad();
      const Shape norm_dims = range_dims(x.dim() - k, x.dim()), lead_dims = range_dims(0, x.dim() - k);
      if (GradMode::is_enabled()) {
        // create_graph: the same formulas in differentiable ops, statistics recomputed from x.
        Tensor xc = rms ? x : x - kiln::mean(x, norm_dims, true);
        Tensor r = rsqrt(kiln::mean(xc * xc, norm_dims, true) + eps);
        Tensor xhat = xc * r;
        Tensor h = w.defined() ? g * w : g;
        Tensor inner = h - xhat * kiln::mean(h * xhat, norm_dims, true);
        if (!rms) inner = inner - kiln::mean(h, norm_dims, true);
        return {a.needs(0) ? r * inner : Tensor(), a.needs(1) ? sum_over(g * xhat, lead_dims) : Tensor(),
                a.needs(2) ? sum_over(g, lead_dims) : Tensor()};
      }
      Tensor gx = a.needs(0) ? Tensor::empty(x.shape(), x.dtype(), x.device()) : Tensor();
      Tensor gw = a.needs(1) ? Tensor::empty(w.shape(), w.dtype(), w.device()) : Tensor();
      Tensor gb = a.needs(2) ? Tensor::empty(norm_shape, x.dtype(), x.device()) : Tensor();
      const Tensor gc = contiguous(g), xc = contiguous(x), wc = w.defined() ? contiguous(w) : w;
      const Tensor mean = a.saved[2], rstd = a.saved[3];
      KILN_LAUNCH("layer_norm_backward", backend::cpu::layer_norm_backward(gc, xc, wc, mean, rstd, rms, gx, gw, gb));
      return {gx, gw, gb};
    });
  }
  return out;
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  return layer_norm_impl("layer_norm", x, normalized_shape, weight, bias, eps, false);
}

Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, double eps) {
  return layer_norm_impl("rms_norm", x, normalized_shape, weight, Tensor(), eps, true);
}

// ---- batch norm ----

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, BatchNormOptions opts) {
  const char* op = "batch_norm";
  check_defined(op, x);
  backend::device_of(op, x, running_mean, running_var, weight, bias);
  KILN_CHECK(is_floating(x.dtype()), op, "expects a floating input (f32, f64, bf16), got {} {}", name(x.dtype()),
             to_string(x.shape()));
  KILN_CHECK(x.dim() >= 2, op, "expects input [B, C], [B, C, L] or [B, C, H, W], got {}", to_string(x.shape()));
  const int64_t C = x.size(1);
  check_param(op, "weight", weight, {C}, x);
  check_param(op, "bias", bias, {C}, x);
  KILN_CHECK(running_mean.defined() == running_var.defined(), op,
             "running_mean and running_var must both be given or both be undefined");
  for (const auto& [what, buf] : {std::pair{"running_mean", running_mean}, std::pair{"running_var", running_var}}) {
    if (!buf.defined()) continue;
    KILN_CHECK(buf.shape() == Shape{C}, op, "{} of shape {} does not match the {} channels of input {}", what,
               to_string(buf.shape()), C, to_string(x.shape()));
    KILN_CHECK(is_floating(buf.dtype()), op, "{} must be floating, got {}", what, name(buf.dtype()));
  }
  KILN_CHECK(training || running_mean.defined(), op, "running_mean and running_var are required in eval mode");
  const int64_t per_channel = C ? x.numel() / C : 0;
  KILN_CHECK(!training || per_channel > 1, op,
             "Expected more than 1 value per channel when training, got input of shape {}", to_string(x.shape()));
  KILN_CHECK(opts.eps >= 0 && std::isfinite(opts.eps), op, "eps must be finite and >= 0, got {}", opts.eps);
  KILN_CHECK(std::isfinite(opts.momentum), op, "momentum must be finite, got {}", opts.momentum);

  const DType sd = stat_dtype(x.dtype());
  Tensor xc = contiguous_nograd(x);
  Tensor mean, invstd;
  {
    NoGradGuard no_grad;
    if (training) {
      mean = Tensor::empty({C}, sd, x.device());
      Tensor var = Tensor::empty({C}, sd, x.device());
      KILN_LAUNCH("batch_norm_stats", backend::cpu::batch_norm_stats(xc, mean, var));
      invstd = rsqrt(add(var, opts.eps));
      if (running_mean.defined()) {
        // running = (1 - m) * running + m * batch (SPECS L8: biased variance unless asked).
        const double m = opts.momentum, n = double(per_channel);
        Tensor v = opts.unbiased_running_var ? mul(var, n / (n - 1)) : var;
        add_(mul_(running_mean, 1 - m), to(mean, running_mean.dtype()), m);
        add_(mul_(running_var, 1 - m), to(v, running_var.dtype()), m);
      }
    } else {
      mean = contiguous(to(running_mean, sd).clone());
      invstd = rsqrt(add(to(running_var, sd), opts.eps));
    }
  }
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  KILN_LAUNCH("batch_norm_apply", backend::cpu::batch_norm_apply(xc, mean, invstd, contiguous_nograd(weight), contiguous_nograd(bias), out));

  if (needs_grad(x, weight, bias)) {
    const double eps = opts.eps;
    record(op, {x, weight, bias}, {out}, {x, weight, mean, invstd}, [training, eps](const VjpArgs& a) -> Grads {
      const Tensor& x = a.saved[0];
      const Tensor& w = a.saved[1];
      const Tensor& g = a.grad();
      const int64_t C = x.size(1);
      Shape dims = range_dims(0, x.dim()), bshape = Shape::filled(x.dim(), 1);
      dims.erase(1);
      bshape[1] = C;
      if (GradMode::is_enabled()) {
        // create_graph: differentiable ops; in training the statistics are recomputed from x.
        Tensor xc, r;
        if (training) {
          xc = x - kiln::mean(x, dims, true);
          r = rsqrt(kiln::mean(xc * xc, dims, true) + eps);
        } else {
          xc = x - to(a.saved[2], x.dtype()).view(bshape);
          r = to(a.saved[3], x.dtype()).view(bshape);
        }
        Tensor xhat = xc * r;
        Tensor wr = w.defined() ? r * w.view(bshape) : r;
        Tensor gx = training ? wr * (g - kiln::mean(g, dims, true) - xhat * kiln::mean(g * xhat, dims, true))
                             : wr * g;
        return {a.needs(0) ? gx : Tensor(), a.needs(1) ? sum(g * xhat, dims) : Tensor(),
                a.needs(2) ? sum(g, dims) : Tensor()};
      }
      Tensor gx = a.needs(0) ? Tensor::empty(x.shape(), x.dtype(), x.device()) : Tensor();
      Tensor gw = a.needs(1) ? Tensor::empty({C}, x.dtype(), x.device()) : Tensor();
      Tensor gb = a.needs(2) ? Tensor::empty({C}, x.dtype(), x.device()) : Tensor();
      const Tensor gc = contiguous(g), xc = contiguous(x), wc = w.defined() ? contiguous(w) : w;
      const Tensor mean = a.saved[2], invstd = a.saved[3];
      KILN_LAUNCH("batch_norm_backward",
                  backend::cpu::batch_norm_backward(gc, xc, mean, invstd, wc, training, gx, gw, gb));
      return {gx, gw, gb};
    });
  }
  return out;
}

}  // namespace kiln
