// Flow matching (SPECS G6; Lipman et al. 2023, "rectified flow" in Liu et al.):
// the linear probability path, its training pairs, and ODE samplers.
//
// NOTE [Flow time convention]: t = 0 is NOISE, t = 1 is DATA.
//   x_t = (1 - t) x0 + t x1,   x0 ~ N(0, I) (noise),  x1 ~ data,
//   target velocity u = dx_t/dt = x1 - x0,  loss = mean((v(x_t, t) - u)^2).
// Sampling integrates dx/dt = v(x, t) from t = 0 (a noise draw) to t = 1.
// (Some codebases, e.g. SD3 / lerobot, run time the other way; kiln does not.)
//
//   models::FlowPath path({.time_sampling = models::TimeSampling::logit_normal});
//   auto s = path.sample(x1, rngs);                    // draws "flow" noise and t
//   Tensor loss = path.loss(model(s.xt, s.t), s);     // MSE to x1 - x0
//   Tensor x = models::sample_flow(velocity, noise, {.steps = 50, .solver = models::FlowSolver::heun});
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "kiln/core/rngs.h"
#include "kiln/core/tensor.h"

namespace kiln::models {

/// How training draws t in [0, 1].
enum class TimeSampling {
  uniform,       // t ~ U(0, 1)
  logit_normal,  // t = sigmoid(m + s n), n ~ N(0, 1) (SD3's; more weight mid-path)
};

struct FlowPathOptions {
  TimeSampling time_sampling = TimeSampling::uniform;
  double logit_mean = 0.0;  // m, logit_normal only
  double logit_std = 1.0;   // s, logit_normal only
  /// The Rngs stream the noise x0 and the times t are drawn from (two
  /// generators per sample(): one for t, then one for x0).
  std::string stream = "flow";
};

/// One batch of training pairs on the path. Shapes: x1's [B, ...]; t [B].
struct FlowSample {
  Tensor x0;      // noise, like x1
  Tensor t;       // [B], x1's dtype
  Tensor xt;      // (1 - t) x0 + t x1
  Tensor target;  // x1 - x0
};

class FlowPath {
 public:
  explicit FlowPath(const FlowPathOptions& options = {});

  /// t [B] in x's dtype, per the options, from gen.
  Tensor sample_t(int64_t batch, Generator& gen, DType dtype = kF32) const;
  /// x_t = (1 - t) x0 + t x1, t [B] broadcast over x0's trailing dims. Differentiable.
  Tensor interpolate(const Tensor& x0, const Tensor& x1, const Tensor& t) const;
  /// u = x1 - x0 (constant along the linear path).
  Tensor target(const Tensor& x0, const Tensor& x1) const;
  /// Draws t (rngs.next(stream)) and x0 ~ N(0, I) (rngs.next(stream)) for data
  /// x1 [B, ...] and builds the pair.
  FlowSample sample(const Tensor& x1, Rngs& rngs) const;
  /// mean((velocity - s.target)^2) over every element; velocity shaped as x1.
  Tensor loss(const Tensor& velocity, const FlowSample& s) const;

  FlowPathOptions options;
};

/// The model's velocity at (x [B, ...], t [B]); t is the same for every row
/// during sampling.
using VelocityFn = std::function<Tensor(const Tensor& x, const Tensor& t)>;

enum class FlowSolver {
  euler,  // x += h v(x, t): one evaluation per step
  heun,   // x += h/2 (v(x, t) + v(x + h v, t + h)): two per step (the last step too)
};

struct FlowSampleOptions {
  int64_t steps = 50;  // equal steps h = 1 / steps from t = 0 to 1
  FlowSolver solver = FlowSolver::euler;
};

/// Integrates dx/dt = velocity(x, t) from x(0) = x0 (noise) to t = 1 and
/// returns x(1). Runs under NoGradGuard. kiln::Error for steps < 1.
Tensor sample_flow(const VelocityFn& velocity, const Tensor& x0, const FlowSampleOptions& options = {});

/// The same from a fresh noise draw x0 ~ N(0, I) of `shape` from gen: a seed
/// gives one set of samples.
Tensor sample_flow(const VelocityFn& velocity, const Shape& shape, Generator& gen,
                   const FlowSampleOptions& options = {}, DType dtype = kF32);

}  // namespace kiln::models
