#include "kiln/models/flow.h"

#include <cmath>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/random.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"

namespace kiln::models {

namespace {
constexpr const char* kPath = "FlowPath";

// t [B] -> [B, 1, ..., 1] to broadcast over a [B, ...] tensor of rank `rank`.
Tensor per_row(const Tensor& t, int64_t rank) {
  std::vector<int64_t> s(static_cast<size_t>(rank), 1);
  s[0] = t.size(0);
  return t.reshape(Shape(s));
}
}  // namespace

FlowPath::FlowPath(const FlowPathOptions& o) : options(o) {
  KILN_CHECK(std::isfinite(o.logit_mean) && std::isfinite(o.logit_std) && o.logit_std > 0, kPath,
             "logit_normal needs a finite logit_mean and logit_std > 0, got {} and {}", o.logit_mean, o.logit_std);
  KILN_CHECK(!o.stream.empty(), kPath, "stream must be named");
}

Tensor FlowPath::sample_t(int64_t batch, Generator& gen, DType dtype) const {
  KILN_CHECK(batch > 0, kPath, "sample_t: batch must be positive, got {}", batch);
  KILN_CHECK(is_floating(dtype), kPath, "sample_t: dtype must be floating, got {}", name(dtype));
  if (options.time_sampling == TimeSampling::uniform) return rand({batch}, gen, {.dtype = dtype});
  Tensor n = randn({batch}, gen, {.dtype = dtype});
  return sigmoid(add(mul(n, options.logit_std), options.logit_mean));
}

Tensor FlowPath::interpolate(const Tensor& x0, const Tensor& x1, const Tensor& t) const {
  KILN_CHECK(x0.defined() && x1.defined() && x0.shape() == x1.shape() && x0.dim() >= 1, kPath,
             "interpolate: x0 {} and x1 {} must be defined, of one shape [B, ...]",
             x0.defined() ? to_string(x0.shape()) : "undefined", x1.defined() ? to_string(x1.shape()) : "undefined");
  KILN_CHECK(t.defined() && t.dim() == 1 && t.size(0) == x1.size(0), kPath, "interpolate: t {} must be [B = {}]",
             t.defined() ? to_string(t.shape()) : "undefined", x1.size(0));
  const Tensor tb = per_row(t, x1.dim());
  return add(mul(rsub(tb, 1), x0), mul(tb, x1));  // (1 - t) x0 + t x1
}

Tensor FlowPath::target(const Tensor& x0, const Tensor& x1) const {
  KILN_CHECK(x0.defined() && x1.defined() && x0.shape() == x1.shape(), kPath,
             "target: x0 {} and x1 {} must have one shape", x0.defined() ? to_string(x0.shape()) : "undefined",
             x1.defined() ? to_string(x1.shape()) : "undefined");
  return sub(x1, x0);
}

FlowSample FlowPath::sample(const Tensor& x1, Rngs& rngs) const {
  KILN_CHECK(x1.defined() && x1.dim() >= 1 && x1.size(0) > 0 && is_floating(x1.dtype()), kPath,
             "sample: x1 {} must be a floating [B, ...] with B > 0",
             x1.defined() ? to_string(x1.shape()) : "undefined");
  Generator gt = rngs.next(options.stream);
  Generator gx = rngs.next(options.stream);
  FlowSample s;
  s.t = sample_t(x1.size(0), gt, x1.dtype());
  s.x0 = randn(x1.shape(), gx, {.dtype = x1.dtype(), .device = x1.device()});
  s.xt = interpolate(s.x0, x1, s.t);
  s.target = target(s.x0, x1);
  return s;
}

Tensor FlowPath::loss(const Tensor& velocity, const FlowSample& s) const {
  KILN_CHECK(velocity.defined() && s.target.defined() && velocity.shape() == s.target.shape(), kPath,
             "loss: velocity {} must have the target's shape {}",
             velocity.defined() ? to_string(velocity.shape()) : "undefined",
             s.target.defined() ? to_string(s.target.shape()) : "undefined");
  return mse_loss(velocity, s.target);
}

Tensor sample_flow(const VelocityFn& velocity, const Tensor& x0, const FlowSampleOptions& o) {
  KILN_CHECK(o.steps >= 1, "sample_flow", "steps must be at least 1, got {}", o.steps);
  KILN_CHECK(x0.defined() && x0.dim() >= 1 && is_floating(x0.dtype()), "sample_flow",
             "x0 {} must be a floating [B, ...]", x0.defined() ? to_string(x0.shape()) : "undefined");
  NoGradGuard no_grad;
  const int64_t B = x0.size(0);
  const double h = 1.0 / double(o.steps);
  Tensor x = x0;
  auto v_at = [&](const Tensor& xs, double t) {
    Tensor v = velocity(xs, full({B}, t, {.dtype = x0.dtype(), .device = x0.device()}));
    KILN_CHECK(v.defined() && v.shape() == xs.shape(), "sample_flow", "velocity {} must have x's shape {}",
               v.defined() ? to_string(v.shape()) : "undefined", to_string(xs.shape()));
    return v;
  };
  for (int64_t i = 0; i < o.steps; ++i) {
    const double t = double(i) * h;
    Tensor v = v_at(x, t);
    if (o.solver == FlowSolver::euler) {
      x = add(x, mul(v, h));
    } else {
      Tensor xe = add(x, mul(v, h));
      Tensor v2 = v_at(xe, double(i + 1) * h);
      x = add(x, mul(add(v, v2), 0.5 * h));
    }
  }
  return x;
}

Tensor sample_flow(const VelocityFn& velocity, const Shape& shape, Generator& gen, const FlowSampleOptions& o,
                   DType dtype) {
  KILN_CHECK(o.steps >= 1, "sample_flow", "steps must be at least 1, got {}", o.steps);
  return sample_flow(velocity, randn(shape, gen, {.dtype = dtype}), o);
}

}  // namespace kiln::models
