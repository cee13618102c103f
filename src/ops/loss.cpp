// Losses: argument checks, reductions and vjps around the fused kernels in
// src/backend/cpu/nn/loss.cpp. When grad mode is on during backward (create_graph)
// the vjps compose kiln ops instead, so higher derivatives work.
#include "kiln/ops/loss.h"

#include <cmath>

#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/index.h"
#include "kiln/ops/record.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"
#include "src/backend/backend.h"
#include "src/backend/cpu/copy/copy.h"
#include "src/backend/cpu/nn/loss.h"
#include "src/ops/checks.h"

namespace kiln {

namespace {

DType stat_dtype(DType t) { return t == kF64 ? kF64 : kF32; }

Tensor nograd(const Tensor& t, DType dtype) {
  if (!t.defined()) return t;
  NoGradGuard no_grad;
  return contiguous(to(t, dtype));
}


// ---- cross-entropy ----

// op: "cross_entropy" or "masked_cross_entropy", for errors and the tape.
Tensor cross_entropy_impl(const char* op, const Tensor& logits, const Tensor& targets, const Tensor& mask,
                          const CrossEntropyOptions& opts) {
  check_defined(op, logits, "logits");
  check_defined(op, targets, "targets");
  backend::device_of(op, logits, targets, mask, opts.weight);
  KILN_CHECK(is_floating(logits.dtype()), op, "expects floating logits (f32, f64, bf16), got {} {}",
             name(logits.dtype()), to_string(logits.shape()));
  KILN_CHECK(logits.dim() >= 1, op, "logits must have a class dim, got a scalar");
  KILN_CHECK(targets.dtype() == kI32 || targets.dtype() == kI64, op,
             "targets must be class indices of dtype i32 or i64, got {} {}", name(targets.dtype()),
             to_string(targets.shape()));
  const int64_t cd = wrap_dim(op, opts.class_dim, logits.dim());
  Shape want = logits.shape();
  want.erase(size_t(cd));
  KILN_CHECK(targets.shape() == want, op,
             "targets of shape {} do not match logits {} without class dim {} (expected {})",
             to_string(targets.shape()), to_string(logits.shape()), cd, to_string(want));
  const int64_t C = logits.size(cd);
  KILN_CHECK(C > 0, op, "logits {} have no classes along dim {}", to_string(logits.shape()), cd);
  KILN_CHECK(opts.label_smoothing >= 0.0 && opts.label_smoothing <= 1.0, op,
             "label_smoothing must be in [0, 1], got {}", opts.label_smoothing);
  if (mask.defined()) {
    KILN_CHECK(mask.dtype() == kBool || is_floating(mask.dtype()), op, "mask must be bool or floating, got {}",
               name(mask.dtype()));
    KILN_CHECK(mask.shape() == targets.shape(), op, "mask of shape {} does not match targets {}",
               to_string(mask.shape()), to_string(targets.shape()));
  }
  if (opts.weight.defined()) {
    KILN_CHECK(opts.weight.shape() == Shape{C}, op, "weight of shape {} does not match the {} classes of logits {}",
               to_string(opts.weight.shape()), C, to_string(logits.shape()));
    KILN_CHECK(opts.weight.dtype() == logits.dtype(), op, "weight has dtype {} but logits have dtype {}",
               name(opts.weight.dtype()), name(logits.dtype()));
    KILN_CHECK(opts.label_smoothing == 0.0, op, "weight together with label_smoothing is not supported");
    KILN_CHECK(!needs_grad(opts.weight), op, "no gradient flows to weight; pass weight.detach()");
  }
  Tensor tc = nograd(targets, targets.dtype());
  // The target check reads the targets' values: a launch, so that a replay
  // checks each new batch as eager does.
  const int64_t ignore_index = opts.ignore_index;
  KILN_LAUNCH(op, if (int64_t bad = backend::cpu::first_bad_target(tc, C, ignore_index); bad >= 0) {
    const int64_t v = tc.dtype() == kI32 ? tc.data<int32_t>()[bad] : tc.data<int64_t>()[bad];
    KILN_FAIL(op, "target {} at flat position {} is out of range for {} classes (expected [0, {}) or ignore_index {})",
              v, bad, C, C, ignore_index);
  });

  // The kernel wants rows of C contiguous classes: move the class dim last
  // (differentiable ops, so the gradient flows back through them).
  Tensor x = logits;
  if (cd != logits.dim() - 1) {
    Shape perm;
    for (int64_t d = 0; d < logits.dim(); ++d)
      if (d != cd) perm.push_back(d);
    perm.push_back(cd);
    x = permute(logits, perm);
  }
  Tensor xc = contiguous(x);  // x itself when already contiguous
  const DType dt = logits.dtype();
  Tensor weights = nograd(mask, dt);
  if (opts.weight.defined()) {
    // Per-row weight w[t_r] (ignored rows read class 0; they never count), times the mask.
    NoGradGuard no_grad;
    Tensor safe = where(eq(tc, opts.ignore_index), Scalar(0), tc);
    Tensor cw = reshape(index_select(opts.weight, 0, reshape(safe, {-1})), targets.shape());
    weights = contiguous(weights.defined() ? weights * cw : cw);
  }
  const int64_t R = tc.numel();
  Tensor lse = Tensor::empty({R}, stat_dtype(dt), xc.device());
  Tensor rows = opts.reduction == Reduction::None ? Tensor::empty(targets.shape(), dt, xc.device()) : Tensor();
  // With a backward to come and short rows, the forward keeps the softmax
  // (R x C, as PyTorch's log_softmax keeps its output) so the backward is one
  // multiply-subtract pass: on rows of tens of classes the per-row steps, not
  // the exps, cost the most. Long rows (a language model's vocabulary) save
  // only lse and recompute the exps: no second [R, C] tensor held.
  constexpr int64_t kKeepProbsMaxClasses = 1024;
  const bool grad = needs_grad(xc);
  Tensor probs = grad && C <= kKeepProbsMaxClasses ? Tensor::empty({R, C}, dt, xc.device()) : Tensor();
  // Mean divides by the weight of the counted rows; nothing counted gives 0
  // (SPECS F2). That weight depends on the targets, so the scale lives in a
  // slot the forward writes and the backward reads: a replay of both
  // (NOTE [Recorded launches]) uses this batch's scale, never the recorded one.
  auto scale_slot = std::make_shared<double>(1.0);
  Tensor out = opts.reduction == Reduction::None ? rows : Tensor::empty({}, dt, xc.device());
  const bool mean = opts.reduction == Reduction::Mean, reduce = opts.reduction != Reduction::None;
  const double smoothing = opts.label_smoothing;
  KILN_LAUNCH(op, double total = 0, wsum = 0;
              backend::cpu::cross_entropy(xc, tc, weights, ignore_index, smoothing, lse, probs, rows, &total, &wsum);
              const double sc = mean ? (wsum > 0 ? 1.0 / wsum : 0.0) : 1.0; *scale_slot = sc;
              if (reduce) backend::cpu::fill(out, total * sc));

  if (grad) {
    const int64_t ignore = opts.ignore_index;
    const double s = opts.label_smoothing;
    record(op, {xc}, {out}, {xc, tc, weights, lse, probs}, [ignore, s, scale_slot, C](const VjpArgs& a) -> Grads {
      const double scale = *scale_slot;
      const Tensor& x = a.saved[0];
      const Tensor& t = a.saved[1];
      const Tensor& w = a.saved[2];
      const Tensor& g = a.grad();
      if (GradMode::is_enabled()) {
        // create_graph: (softmax - q) * coef in differentiable ops.
        Tensor ignored = eq(t, ignore);
        Tensor q = to(one_hot(where(ignored, Scalar(0), t), C), x.dtype()) * (1 - s) + s / double(C);
        Tensor coef = where(ignored, 0.0, w.defined() ? w : ones(t.shape(), {.dtype = x.dtype(), .device = x.device()}));
        coef = to(coef, x.dtype()) * (g * scale);
        return {(softmax(x, -1) - q) * unsqueeze(coef, -1)};
      }
      Tensor gx = Tensor::empty(x.shape(), x.dtype(), x.device());
      const Tensor gc = contiguous(g), lse = a.saved[3], probs = a.saved[4];
      KILN_LAUNCH("cross_entropy_backward",
                  backend::cpu::cross_entropy_backward(x, t, w, ignore, s, lse, probs, gc, *scale_slot, gx));
      return {gx};
    });
  }
  return out;
}

// ---- pointwise losses ----

Tensor reduce(const Tensor& l, Reduction r) {
  return r == Reduction::None ? l : r == Reduction::Sum ? sum(l) : mean(l);
}

// dl/dx and dl/dy in differentiable kiln ops (create_graph, and the composite path).
std::pair<Tensor, Tensor> pointwise_grads(backend::cpu::PointwiseLoss kind, double beta, const Tensor& x, const Tensor& y,
                                          const Tensor& pw) {
  using K = backend::cpu::PointwiseLoss;
  Tensor d = x - y;
  switch (kind) {
    case K::mse: return {2.0 * d, -2.0 * d};
    case K::l1: return {sign(d), -sign(d)};
    case K::smooth_l1: {
      Tensor dx = beta == 0 ? sign(d) : where(lt(abs(d), beta), d / beta, sign(d));
      return {dx, -dx};
    }
    case K::bce:
      return {d / clamp_min((1.0 - x) * x, 1e-12), clamp_min(log1p(-x), -100.0) - clamp_min(log(x), -100.0)};
    case K::bce_with_logits: {
      Tensor lw = pw.defined() ? 1.0 + (pw - 1.0) * y : ones_like(y);
      Tensor dy = pw.defined() ? -x + (pw - 1.0) * softplus(-x) : -x;
      return {(1.0 - y) - lw * sigmoid(-x), dy};
    }
  }
  return {};
}

Tensor pointwise_impl(const char* op, backend::cpu::PointwiseLoss kind, const Tensor& x, const Tensor& y, const Tensor& weight,
                      const Tensor& pos_weight, Reduction reduction, double beta) {
  using K = backend::cpu::PointwiseLoss;
  check_defined(op, x);
  check_defined(op, y, "target");
  backend::device_of(op, x, y, weight, pos_weight);
  KILN_CHECK(is_floating(x.dtype()), op, "expects a floating input (f32, f64, bf16), got {} {}", name(x.dtype()),
             to_string(x.shape()));
  KILN_CHECK(y.dtype() == x.dtype(), op, "target has dtype {} but input has dtype {}", name(y.dtype()),
             name(x.dtype()));
  KILN_CHECK(x.shape() == y.shape(), op, "input {} and target {} must have the same shape", to_string(x.shape()),
             to_string(y.shape()));
  for (const auto& [what, p] : {std::pair{"weight", weight}, std::pair{"pos_weight", pos_weight}}) {
    if (!p.defined()) continue;
    KILN_CHECK(p.dtype() == x.dtype(), op, "{} has dtype {} but input has dtype {}", what, name(p.dtype()),
               name(x.dtype()));
    bool ok = p.dim() <= x.dim();
    for (int64_t i = 1; ok && i <= p.dim(); ++i)
      ok = p.size(-i) == 1 || p.size(-i) == x.size(-i);
    KILN_CHECK(ok, op, "{} of shape {} does not broadcast to input {}", what, to_string(p.shape()),
               to_string(x.shape()));
  }
  KILN_CHECK(beta >= 0 && std::isfinite(beta), op, "beta must be finite and >= 0, got {}", beta);
  Tensor xc = nograd(x, x.dtype()), yc = nograd(y, y.dtype());
  if (kind == K::bce) {
    const Shape xs = x.shape();  // a launch: a replay checks each new input
    KILN_LAUNCH(op, KILN_CHECK(backend::cpu::all_probabilities(xc), op,
                               "input values must be probabilities in [0, 1] (input {})", to_string(xs)));
  }

  // A weight that itself needs a gradient: compose kiln ops (rare; no fused kernel).
  if (needs_grad(weight, pos_weight)) {
    Tensor l = kind == K::bce
                   ? -(y * clamp_min(log(x), -100.0) + (1.0 - y) * clamp_min(log1p(-x), -100.0))
                   : (1.0 - y) * x + (pos_weight.defined() ? 1.0 + (pos_weight - 1.0) * y : ones_like(y)) * softplus(-x);
    return reduce(weight.defined() ? l * weight : l, reduction);
  }

  Tensor wc, pc;
  {
    NoGradGuard no_grad;
    if (weight.defined()) wc = contiguous(expand(weight, x.shape()));
    if (pos_weight.defined()) pc = contiguous(expand(pos_weight, x.shape()));
  }
  const int64_t n = x.numel();
  const double scale = reduction == Reduction::Mean ? 1.0 / double(n) : 1.0;  // n == 0: NaN, as PyTorch
  const bool reduce = reduction != Reduction::None;
  // The kernel writes the elementwise losses (None) or returns their sum,
  // which the launch writes into the scalar out (so a replay refills it).
  Tensor out = Tensor::empty(reduce ? Shape{} : x.shape(), x.dtype(), x.device());
  KILN_LAUNCH(op, const double total = backend::cpu::pointwise_loss(kind, beta, xc, yc, wc, pc, reduce ? Tensor() : out);
              if (reduce) backend::cpu::fill(out, total * scale));

  if (needs_grad(x, y)) {
    record(op, {x, y}, {out}, {xc, yc, wc, pc}, [kind, beta, scale](const VjpArgs& a) -> Grads {
      const Tensor &x = a.saved[0], &y = a.saved[1], &w = a.saved[2], &pw = a.saved[3];
      if (GradMode::is_enabled()) {
        auto [dx, dy] = pointwise_grads(kind, beta, x, y, pw);
        Tensor k = a.grad() * scale;
        if (w.defined()) k = k * w;
        return {a.needs(0) ? k * dx : Tensor(), a.needs(1) ? k * dy : Tensor()};
      }
      Tensor gx = a.needs(0) ? Tensor::empty(x.shape(), x.dtype(), x.device()) : Tensor();
      Tensor gy = a.needs(1) ? Tensor::empty(x.shape(), x.dtype(), x.device()) : Tensor();
      const Tensor gc = contiguous(a.grad()), xs = x, ys = y, ws = w, pws = pw;
      KILN_LAUNCH("pointwise_loss_backward",
                  backend::cpu::pointwise_loss_backward(kind, beta, xs, ys, ws, pws, gc, scale, gx, gy));
      return {gx, gy};
    });
  }
  return out;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& opts) {
  return cross_entropy_impl("cross_entropy", logits, targets, Tensor(), opts);
}

Tensor masked_cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& mask,
                            const CrossEntropyOptions& opts) {
  KILN_CHECK(mask.defined(), "masked_cross_entropy", "mask is an undefined tensor (use cross_entropy without a mask)");
  return cross_entropy_impl("masked_cross_entropy", logits, targets, mask, opts);
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& targets, const Tensor& weight,
                                        const Tensor& pos_weight, Reduction reduction) {
  return pointwise_impl("binary_cross_entropy_with_logits", backend::cpu::PointwiseLoss::bce_with_logits, logits, targets,
                        weight, pos_weight, reduction, 0.0);
}

Tensor binary_cross_entropy(const Tensor& probs, const Tensor& targets, const Tensor& weight, Reduction reduction) {
  return pointwise_impl("binary_cross_entropy", backend::cpu::PointwiseLoss::bce, probs, targets, weight, Tensor(), reduction,
                        0.0);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return pointwise_impl("mse_loss", backend::cpu::PointwiseLoss::mse, input, target, Tensor(), Tensor(), reduction, 0.0);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return pointwise_impl("l1_loss", backend::cpu::PointwiseLoss::l1, input, target, Tensor(), Tensor(), reduction, 0.0);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  return pointwise_impl("smooth_l1_loss", backend::cpu::PointwiseLoss::smooth_l1, input, target, Tensor(), Tensor(), reduction,
                        beta);
}

}  // namespace kiln
