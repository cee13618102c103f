// CartPole-v1: Gymnasium's classic_control/cartpole.py (CartPoleEnv.step with
// kinematics_integrator "euler", reset) under wrappers/time_limit.py's
// TimeLimit(500), for E copies at once. Compiled with -ffp-contract=off
// (CMakeLists.txt) so that every operation rounds as Python's floats do: the
// expressions keep Gymnasium's order of operations, std::sin/std::cos are
// glibc's, as math.sin/math.cos are, and Gymnasium's v**2 is glibc's
// pow(v, 2.0), which is not always the rounded v * v (NOTE [Python's
// squares] in native_env.h). tools/goldens/rl_envs.py is the reference the
// tests compare with.
#include "kiln/rl/cartpole.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>

#include "kiln/core/error.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/creation.h"
#include "src/rl/native_env.h"

namespace kiln::rl {

namespace {

// Gymnasium's constants, derived the same way.
constexpr double kGravity = 9.8;
constexpr double kMassCart = 1.0;
constexpr double kMassPole = 0.1;
constexpr double kTotalMass = kMassPole + kMassCart;
constexpr double kLength = 0.5;  // half the pole's length
constexpr double kPoleMassLength = kMassPole * kLength;
constexpr double kForceMag = 10.0;
constexpr double kTau = 0.02;  // seconds per step
constexpr double kThetaThreshold = 12 * 2 * std::numbers::pi / 360;
constexpr double kXThreshold = 2.4;
constexpr int64_t kMaxEpisodeSteps = 500;
constexpr double kResetLow[4] = {-0.05, -0.05, -0.05, -0.05};
constexpr double kResetHigh[4] = {0.05, 0.05, 0.05, 0.05};
// Copies per parallel chunk: one step of one copy is ~50 ns (a sin and a cos).
constexpr int64_t kGrain = 512;

EnvSpec cartpole_spec() {
  // Gymnasium's observation bounds: twice the termination thresholds, as f32.
  const double fmax = std::numeric_limits<float>::max();
  const double x2 = float(kXThreshold * 2), th2 = float(kThetaThreshold * 2);
  return EnvSpec{.name = "CartPole-v1",
                 .observation = Space::box({4}, {-x2, -fmax, -th2, -fmax}, {x2, fmax, th2, fmax}),
                 .action = Space::discrete(2),
                 .max_episode_steps = kMaxEpisodeSteps,
                 .reward_threshold = 475};
}

}  // namespace

CartPole::CartPole(int64_t num_envs) : spec_(cartpole_spec()), num_envs_(num_envs) {
  KILN_CHECK(num_envs > 0, "CartPole", "num_envs must be positive, got {}", num_envs);
  const size_t e = size_t(num_envs);
  x_.assign(e, 0.0);
  x_dot_.assign(e, 0.0);
  theta_.assign(e, 0.0);
  theta_dot_.assign(e, 0.0);
  elapsed_.assign(e, 0);
  gens_.assign(e, Generator(0));
}

Tensor CartPole::reset(uint64_t seed) {
  Tensor obs = Tensor::empty({num_envs_, 4}, kF32);
  float* o = obs.data<float>();
  for (int64_t i = 0; i < num_envs_; ++i) {
    gens_[i] = env_generator(seed, i);
    double s[4];
    detail::draw_uniform(gens_[i], 4, kResetLow, kResetHigh, s);
    x_[i] = s[0], x_dot_[i] = s[1], theta_[i] = s[2], theta_dot_[i] = s[3];
    for (int k = 0; k < 4; ++k) o[4 * i + k] = float(s[k]);
    elapsed_[i] = 0;
  }
  was_reset_ = true;
  return obs;
}

Transition CartPole::step(const Tensor& actions) {
  constexpr const char* op = "CartPole.step";
  detail::check_actions(op, spec_, num_envs_, was_reset_, actions);
  const Tensor a = actions.contiguous();
  const int64_t* act = a.data<int64_t>();
  for (int64_t i = 0; i < num_envs_; ++i)
    KILN_CHECK(act[i] == 0 || act[i] == 1, op, "actions[{}] = {} is outside {}'s action space Discrete(2) (0 or 1)", i,
               act[i], spec_.name);
  Transition out = detail::empty_transition(spec_, num_envs_);
  parallel_for(0, num_envs_, kGrain, [&](int64_t lo, int64_t hi) { step_range(lo, hi, act, out); });
  return out;
}

// One step of copies [lo, hi): CartPoleEnv.step's arithmetic, TimeLimit's
// count, and the same-step reset of the copies whose episode ended. Each
// block of kBlock copies goes through passes: glibc's sincos (scalar calls)
// and Python's squares into scratch rows, Gymnasium's arithmetic over the
// rows (it vectorises, with the same operations in the same order, so the
// same bits), the flags and outputs, and the resets of the copies that ended.
void CartPole::step_range(int64_t lo, int64_t hi, const int64_t* actions, const Transition& out) {
  constexpr int64_t kBlock = 256;
  float* obs = out.obs.data<float>();
  float* final_obs = out.final_obs.data<float>();
  float* reward = out.reward.data<float>();
  bool* terminated = out.terminated.data<bool>();
  bool* truncated = out.truncated.data<bool>();
  alignas(64) double sintheta[kBlock], costheta[kBlock], theta_dot_sq[kBlock], costheta_sq[kBlock];
  for (int64_t b = lo; b < hi; b += kBlock) {
    const int64_t n = std::min(kBlock, hi - b);
    double* __restrict x = x_.data() + b;
    double* __restrict x_dot = x_dot_.data() + b;
    double* __restrict theta = theta_.data() + b;
    double* __restrict theta_dot = theta_dot_.data() + b;
    const int64_t* __restrict a = actions + b;
    for (int64_t j = 0; j < n; ++j) {
      sintheta[j] = std::sin(theta[j]);
      costheta[j] = std::cos(theta[j]);
    }
    detail::python_squares(theta_dot, theta_dot_sq, n);  // Gymnasium's theta_dot**2
    detail::python_squares(costheta, costheta_sq, n);
    for (int64_t j = 0; j < n; ++j) {
      const double force = a[j] == 1 ? kForceMag : -kForceMag;
      const double temp = (force + kPoleMassLength * theta_dot_sq[j] * sintheta[j]) / kTotalMass;
      const double thetaacc = (kGravity * sintheta[j] - costheta[j] * temp) /
                              (kLength * (4.0 / 3.0 - kMassPole * costheta_sq[j] / kTotalMass));
      const double xacc = temp - kPoleMassLength * thetaacc * costheta[j] / kTotalMass;
      x[j] = x[j] + kTau * x_dot[j];
      x_dot[j] = x_dot[j] + kTau * xacc;
      theta[j] = theta[j] + kTau * theta_dot[j];
      theta_dot[j] = theta_dot[j] + kTau * thetaacc;
    }
    // Termination, the time limit and the outputs, for every copy.
    int64_t* __restrict elapsed = elapsed_.data() + b;
    float* __restrict f = final_obs + 4 * b;
    bool* __restrict term = terminated + b;
    bool* __restrict trunc = truncated + b;
    for (int64_t j = 0; j < n; ++j) {
      term[j] =
          (x[j] < -kXThreshold) | (x[j] > kXThreshold) | (theta[j] < -kThetaThreshold) | (theta[j] > kThetaThreshold);
      trunc[j] = ++elapsed[j] >= kMaxEpisodeSteps;
      reward[b + j] = 1.0f;
      f[4 * j] = float(x[j]), f[4 * j + 1] = float(x_dot[j]);
      f[4 * j + 2] = float(theta[j]), f[4 * j + 3] = float(theta_dot[j]);
    }
    std::memcpy(obs + 4 * b, f, size_t(n) * 4 * sizeof(float));
    // The copies whose episode ended start the next one.
    for (int64_t j = 0; j < n; ++j) {
      if (!(term[j] | trunc[j])) continue;
      double r[4];
      detail::draw_uniform(gens_[b + j], 4, kResetLow, kResetHigh, r);
      x[j] = r[0], x_dot[j] = r[1], theta[j] = r[2], theta_dot[j] = r[3];
      elapsed[j] = 0;
      float* o = obs + 4 * (b + j);
      o[0] = float(r[0]), o[1] = float(r[1]), o[2] = float(r[2]), o[3] = float(r[3]);
    }
  }
}

Tensor CartPole::state() const {
  Tensor out = Tensor::empty({num_envs_, 4}, kF64);
  double* s = out.data<double>();
  for (int64_t i = 0; i < num_envs_; ++i)
    s[4 * i] = x_[i], s[4 * i + 1] = x_dot_[i], s[4 * i + 2] = theta_[i], s[4 * i + 3] = theta_dot_[i];
  return out;
}

Tensor CartPole::set_state(const Tensor& state) {
  detail::check_state("CartPole.set_state", num_envs_, was_reset_, state, 4, "x, x_dot, theta, theta_dot");
  const Tensor c = state.contiguous();
  const double* s = c.data<double>();
  Tensor obs = Tensor::empty({num_envs_, 4}, kF32);
  float* o = obs.data<float>();
  for (int64_t i = 0; i < num_envs_; ++i) {
    x_[i] = s[4 * i], x_dot_[i] = s[4 * i + 1], theta_[i] = s[4 * i + 2], theta_dot_[i] = s[4 * i + 3];
    for (int k = 0; k < 4; ++k) o[4 * i + k] = float(s[4 * i + k]);
  }
  return obs;
}

Tensor CartPole::elapsed_steps() const { return tensor(elapsed_); }

}  // namespace kiln::rl
