// Categorical and TanhGaussian (kiln/rl/distributions.h): compositions of
// kiln ops, except the categorical's inverse-CDF draw, a host loop over the
// normalised logits.
#include "kiln/rl/distributions.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <optional>

#include "kiln/core/error.h"
#include "kiln/core/replay.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/index.h"
#include "kiln/ops/random.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"

namespace kiln::rl {

namespace {

template <class T>
int64_t inverse_cdf(const T* logp, int64_t n, double u) {
  // The row sums to 1 up to rounding; scaling u by the actual sum keeps the
  // draw inside the row.
  double total = 0;
  for (int64_t k = 0; k < n; ++k) total += std::exp(double(logp[k]));
  const double target = u * total;
  double cum = 0;
  int64_t last = -1;  // the last category with p > 0
  for (int64_t k = 0; k < n; ++k) {
    const double p = std::exp(double(logp[k]));
    if (p <= 0) continue;
    cum += p;
    last = k;
    if (target < cum) return k;
  }
  return last;
}

const Space& checked_box(const Space& box) {
  KILN_CHECK(box.kind == SpaceKind::Box && box.shape.size() == 1, "TanhGaussian",
             "needs a Box space of shape [A], got {}", box.to_string());
  return box;
}

}  // namespace

// ---- Categorical ----

Categorical::Categorical(const Tensor& logits) {
  KILN_CHECK(logits.defined() && logits.dim() == 2 && logits.size(1) > 0 && is_floating(logits.dtype()),
             "Categorical", "logits must be [B, n] floating with n > 0, got {}", describe(logits));
  logits_ = log_softmax(logits, 1);
}

Tensor Categorical::probs() const { return exp(logits_); }

Tensor Categorical::sample(Generator& gen) const {
  KILN_CHECK(logits_.dtype() == kF32 || logits_.dtype() == kF64, "Categorical.sample",
             "samples from f32 or f64 logits, got {}", describe(logits_));
  const int64_t rows = logits_.size(0), n = logits_.size(1);
  Tensor u = rand({rows}, gen, {.dtype = kF64});
  Tensor lp = logits_.contiguous();
  Tensor out = Tensor::empty({rows}, kI64);
  const double* up = u.data<double>();
  int64_t* op = out.data<int64_t>();
  auto run = [&](auto* p) {
    for (int64_t r = 0; r < rows; ++r) {
      const auto* row = p + r * n;
      for (int64_t k = 0; k < n; ++k)
        KILN_CHECK(!std::isnan(double(row[k])), "Categorical.sample",
                   "row {} of the logits {} has no valid category (nan, +inf or all -inf)", r,
                   to_string(logits_.shape()));
      op[r] = inverse_cdf(row, n, up[r]);
    }
  };
  if (lp.dtype() == kF32) run(lp.data<float>());
  else run(lp.data<double>());
  return out;
}

Tensor Categorical::log_prob(const Tensor& actions) const {
  const int64_t rows = logits_.size(0), n = logits_.size(1);
  KILN_CHECK(actions.defined() && (actions.dtype() == kI64 || actions.dtype() == kI32) && actions.dim() == 1 &&
                 actions.size(0) == rows,
             "Categorical.log_prob", "actions must be [{}] i64 for logits {}, got {}", rows,
             to_string(logits_.shape()), describe(actions));
  Tensor idx = actions.to(kI64).contiguous();
  // A recorded launch (kiln/core/replay.h): a compiled step checks each new batch's actions.
  KILN_LAUNCH("Categorical.log_prob", const int64_t* a = idx.data<int64_t>(); for (int64_t r = 0; r < rows; ++r)
                  KILN_CHECK(a[r] >= 0 && a[r] < n, "Categorical.log_prob", "actions[{}] = {} is outside [0, {})", r,
                             a[r], n));
  return squeeze(gather(logits_, 1, unsqueeze(idx, 1)), 1);
}

Tensor Categorical::entropy() const {
  // torch clamps -inf logits to the dtype's lowest value so that 0 * -inf
  // contributes 0, not nan.
  const double lowest = logits_.dtype() == kF64 ? std::numeric_limits<double>::lowest()
                                                 : double(std::numeric_limits<float>::lowest());
  return neg(sum(probs() * clamp_min(logits_, lowest), {1}));
}

Tensor Categorical::mode() const { return argmax(logits_.detach(), 1); }

// ---- TanhGaussian ----

TanhGaussian::TanhGaussian(const Tensor& mean, const Tensor& log_std, const std::vector<double>& low,
                           const std::vector<double>& high) {
  KILN_CHECK(mean.defined() && mean.dim() == 2 && is_floating(mean.dtype()), "TanhGaussian",
             "mean must be [B, A] floating, got {}", describe(mean));
  const int64_t a = mean.size(1);
  KILN_CHECK(log_std.defined() && log_std.dtype() == mean.dtype() &&
                 (log_std.shape() == mean.shape() || log_std.shape() == Shape{a}),
             "TanhGaussian", "log_std must be {} or [{}] like mean {}, got {}", to_string(mean.shape()), a,
             describe(mean), describe(log_std));
  KILN_CHECK(int64_t(low.size()) == a && int64_t(high.size()) == a, "TanhGaussian",
             "needs {} bounds for mean {}, got {} low and {} high", a, to_string(mean.shape()), low.size(),
             high.size());
  std::vector<double> center(static_cast<size_t>(a)), half(static_cast<size_t>(a));
  for (int64_t i = 0; i < a; ++i) {
    KILN_CHECK(std::isfinite(low[i]) && std::isfinite(high[i]) && low[i] < high[i], "TanhGaussian",
               "bounds must be finite with low < high, got [{}, {}] for dim {}", low[i], high[i], i);
    center[i] = 0.5 * (high[i] + low[i]);
    half[i] = 0.5 * (high[i] - low[i]);
    sum_log_half_range_ += std::log(half[i]);
  }
  mean_ = mean;
  log_std_ = log_std;
  center_ = tensor(center).to(mean.dtype());
  half_range_ = tensor(half).to(mean.dtype());
}

TanhGaussian::TanhGaussian(const Tensor& mean, const Tensor& log_std, const Space& box)
    : TanhGaussian(mean, log_std, checked_box(box).low, box.high) {}

TanhGaussian::Sample TanhGaussian::draw(Generator& gen, bool reparameterised) const {
  std::optional<NoGradGuard> no_grad;
  if (!reparameterised) no_grad.emplace();
  Tensor eps = randn(mean_.shape(), gen, {.dtype = mean_.dtype()});
  Tensor raw = mean_ + exp(log_std_) * eps;
  return {squash(raw), raw};
}

TanhGaussian::Sample TanhGaussian::sample(Generator& gen) const { return draw(gen, false); }
TanhGaussian::Sample TanhGaussian::rsample(Generator& gen) const { return draw(gen, true); }

Tensor TanhGaussian::squash(const Tensor& raw) const { return center_ + half_range_ * tanh(raw); }

Tensor TanhGaussian::mode() const { return squash(mean_); }

Tensor TanhGaussian::log_prob(const Tensor& raw) const {
  KILN_CHECK(raw.defined() && raw.shape() == mean_.shape() && raw.dtype() == mean_.dtype(), "TanhGaussian.log_prob",
             "raw actions must be {} like mean, got {}", describe(mean_), describe(raw));
  constexpr double kLog2 = std::numbers::ln2;
  const double half_log_2pi = 0.5 * std::log(2 * std::numbers::pi);
  // log N(u; mean, std) = -z^2 / 2 - log_std - log(2 pi) / 2 with z = (u - mean) / std
  Tensor z = (raw - mean_) * exp(neg(log_std_));
  Tensor gaussian = -0.5 * square(z) - log_std_;
  // log|d tanh(u) / du| = log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))
  Tensor log_det = 2.0 * (kLog2 - raw - softplus(-2.0 * raw));
  const double constant = double(mean_.size(1)) * half_log_2pi + sum_log_half_range_;
  return sum(gaussian - log_det, {1}) - constant;
}

Tensor TanhGaussian::entropy() const {
  const double half_log_2pi_e = 0.5 * (1.0 + std::log(2 * std::numbers::pi));
  Tensor per_row = log_std_.dim() == 1 ? expand(log_std_, mean_.shape()) : log_std_;
  return sum(per_row, {1}) + double(mean_.size(1)) * half_log_2pi_e;
}

// ---- ActionDistribution ----

ActionDistribution::ActionDistribution(const Space& space, const Tensor& params, const Tensor& log_std) {
  switch (space.kind) {
    case SpaceKind::Discrete:
      KILN_CHECK(params.defined() && params.dim() == 2 && params.size(1) == space.n && !log_std.defined(),
                 "ActionDistribution", "{} needs logits [B, {}] and no log_std, got {} and {}", space.to_string(),
                 space.n, describe(params), describe(log_std));
      categorical_.emplace(params);
      return;
    case SpaceKind::Box:
      KILN_CHECK(space.shape.size() == 1 && params.defined() && params.dim() == 2 && params.size(1) == space.shape[0],
                 "ActionDistribution", "{} needs a mean [B, {}], got {}", space.to_string(),
                 space.shape.empty() ? 0 : space.shape[0], describe(params));
      gaussian_.emplace(params, log_std, space);
      box_ = space;
      return;
    case SpaceKind::Binary: break;
  }
  KILN_FAIL("ActionDistribution", "no action distribution for {} (Discrete or Box([A]) only)", space.to_string());
}

namespace {

// f32 rounding of center + half_range * tanh can land an ulp outside the box;
// the environment gets the action clamped into it, in place: `action` is the
// squash's fresh output, made without a graph and held by nobody else.
Tensor clamp_into(const Tensor& action, const Space& box) {
  Tensor a = action.contiguous().to(kF32);
  float* p = a.data<float>();
  const int64_t dims = int64_t(box.low.size());
  for (int64_t i = 0; i < a.numel(); ++i)
    p[i] = std::clamp(p[i], float(box.low[i % dims]), float(box.high[i % dims]));
  return a;
}

}  // namespace

ActionDistribution::Sample ActionDistribution::sample(Generator& gen) const {
  if (categorical_) {
    Tensor a = categorical_->sample(gen);
    return {a, a};
  }
  auto s = gaussian_->sample(gen);
  return {clamp_into(s.action, box_), s.raw};
}

Tensor ActionDistribution::log_prob(const Tensor& carrier) const {
  return categorical_ ? categorical_->log_prob(carrier) : gaussian_->log_prob(carrier);
}

Tensor ActionDistribution::entropy() const { return categorical_ ? categorical_->entropy() : gaussian_->entropy(); }

Tensor ActionDistribution::mode() const {
  if (categorical_) return categorical_->mode();
  NoGradGuard no_grad;
  return clamp_into(gaussian_->mode(), box_);
}

}  // namespace kiln::rl
