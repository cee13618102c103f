// RunningMoments, RunningMeanStd and RewardScaler (kiln/rl/normalization.h).
#include "kiln/rl/normalization.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <span>

#include "kiln/core/error.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"

namespace kiln::rl {

void RunningMoments::merge(const std::vector<double>& batch_mean, const std::vector<double>& batch_var,
                           double batch_count) {
  // Chan, Golub and LeVeque's pairwise update, as gym's RunningMeanStd.
  const double total = count + batch_count;
  for (size_t i = 0; i < mean.size(); ++i) {
    const double delta = batch_mean[i] - mean[i];
    const double m2 = var[i] * count + batch_var[i] * batch_count + delta * delta * count * batch_count / total;
    mean[i] += delta * batch_count / total;
    var[i] = m2 / total;
  }
  count = total;
}

void RunningMoments::update(const Tensor& x) {
  const int64_t cols = int64_t(mean.size());
  KILN_CHECK(x.defined() && x.dim() >= 1 && x.numel() % std::max<int64_t>(cols, 1) == 0 && is_floating(x.dtype()),
             "RunningMoments.update", "needs rows of {} values, got {}", cols, describe(x));
  const std::vector<double> v = x.to_vector<double>();
  const int64_t rows = int64_t(v.size()) / cols;
  if (rows == 0) return;
  std::vector<double> m(size_t(cols), 0.0), var_(size_t(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) m[c] += v[r * cols + c];
  for (double& a : m) a /= double(rows);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) var_[c] += (v[r * cols + c] - m[c]) * (v[r * cols + c] - m[c]);
  for (double& a : var_) a /= double(rows);
  merge(m, var_, double(rows));
}

// ---- RunningMeanStd ----

RunningMeanStd::RunningMeanStd(const Shape& shape, double clip, double eps) : shape_(shape), clip_(clip), eps_(eps) {
  KILN_CHECK(clip > 0 && eps > 0, "RunningMeanStd", "clip {} and eps {} must be positive", clip, eps);
  mean = register_buffer("mean", zeros(shape));
  var = register_buffer("var", ones(shape));
  count = register_buffer("count", full({}, 1e-4, {.dtype = kF64}));
}

Tensor RunningMeanStd::forward(const Tensor& obs) const {
  return clamp((obs - mean) * rsqrt(var + eps_), -clip_, clip_);
}

void RunningMeanStd::update(const Tensor& obs) {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  KILN_CHECK(obs.defined() && obs.dim() == int64_t(shape_.size()) + 1 &&
                 Shape(std::span<const int64_t>(obs.shape()).subspan(1)) == shape_,
             "RunningMeanStd.update", "observations must be [B, *{}], got {}", to_string(shape_), describe(obs));
  RunningMoments m(n);
  m.mean = mean.to_vector<double>();
  m.var = var.to_vector<double>();
  m.count = count.item<double>();
  m.update(obs);
  std::vector<float> mf(m.mean.begin(), m.mean.end()), vf(m.var.begin(), m.var.end());
  copy_(mean, tensor(mf, shape_));
  copy_(var, tensor(vf, shape_));
  fill_(count, m.count);
}

std::string RunningMeanStd::extra_repr() const {
  return fmt::format("shape={}, clip={}, eps={}", to_string(shape_), clip_, eps_);
}

// ---- RewardScaler ----

RewardScaler::RewardScaler(int64_t num_envs, double gamma, double clip, double eps)
    : returns_(size_t(num_envs), 0.0), moments_(1), gamma_(gamma), clip_(clip), eps_(eps) {
  KILN_CHECK(num_envs > 0, "RewardScaler", "num_envs must be positive, got {}", num_envs);
  KILN_CHECK(gamma >= 0 && gamma <= 1 && clip > 0 && eps > 0, "RewardScaler",
             "needs gamma in [0, 1] and positive clip and eps, got gamma {} clip {} eps {}", gamma, clip, eps);
}

Tensor RewardScaler::operator()(const Tensor& rewards, const Tensor& done) {
  const int64_t e = int64_t(returns_.size());
  KILN_CHECK(rewards.defined() && rewards.shape() == Shape{e} && done.defined() && done.shape() == Shape{e} &&
                 done.dtype() == kBool,
             "RewardScaler", "needs rewards [{}] and done [{}] bool, got {} and {}", e, e, describe(rewards),
             describe(done));
  const std::vector<double> r = rewards.to_vector<double>();
  const std::vector<bool> d = done.to_vector<bool>();
  double m = 0, v = 0;
  for (int64_t i = 0; i < e; ++i) m += returns_[i] = returns_[i] * gamma_ + r[i];
  m /= double(e);
  for (int64_t i = 0; i < e; ++i) v += (returns_[i] - m) * (returns_[i] - m);
  moments_.merge({m}, {v / double(e)}, double(e));
  const double inv_std = 1.0 / std::sqrt(moments_.var[0] + eps_);
  std::vector<float> out(static_cast<size_t>(e));
  for (int64_t i = 0; i < e; ++i) {
    out[i] = float(std::clamp(r[i] * inv_std, -clip_, clip_));
    if (d[i]) returns_[i] = 0;
  }
  return tensor(out);
}

void RewardScaler::reset_returns() { std::fill(returns_.begin(), returns_.end(), 0.0); }

io::State RewardScaler::state() const {
  io::State s{{"count", fmt::format("{}", moments_.count)},
              {"mean", fmt::format("{}", moments_.mean[0])},
              {"var", fmt::format("{}", moments_.var[0])},
              {"num_envs", std::to_string(returns_.size())}};
  for (size_t i = 0; i < returns_.size(); ++i) s[fmt::format("return.{}", i)] = fmt::format("{}", returns_[i]);
  return s;
}

void RewardScaler::load_state(const io::State& s) {
  constexpr const char* op = "RewardScaler";
  const int64_t e = io::state_i64(s, "num_envs", op);
  KILN_CHECK(e == int64_t(returns_.size()), op, "state is for {} environments, this scaler has {}", e,
             returns_.size());
  std::vector<double> returns(returns_.size());
  for (size_t i = 0; i < returns.size(); ++i) returns[i] = io::state_f64(s, fmt::format("return.{}", i), op);
  RunningMoments m(1);
  m.count = io::state_f64(s, "count", op);
  m.mean[0] = io::state_f64(s, "mean", op);
  m.var[0] = io::state_f64(s, "var", op);
  returns_ = std::move(returns);
  moments_ = m;
}

}  // namespace kiln::rl
