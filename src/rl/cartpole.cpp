// CartPole-v1: Gymnasium's classic_control/cartpole.py (CartPoleEnv.step with
// kinematics_integrator "euler", reset) under wrappers/time_limit.py's
// TimeLimit(500), for E copies at once. Compiled with -ffp-contract=off and
// -fno-builtin-pow (CMakeLists.txt) so that every operation rounds as
// Python's floats do: the expressions keep Gymnasium's order of operations,
// std::sin/std::cos are glibc's, as math.sin/math.cos are, and Gymnasium's
// v**2 is glibc's pow(v, 2.0), which is not always the rounded v * v (a
// builtin pow would be folded into the multiply). tools/goldens/rl_envs.py is
// the reference the tests compare with.
#include "kiln/rl/cartpole.h"

#include <cmath>
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
// count, and the same-step reset of the copies whose episode ended.
void CartPole::step_range(int64_t lo, int64_t hi, const int64_t* actions, const Transition& out) {
  float* obs = out.obs.data<float>();
  float* final_obs = out.final_obs.data<float>();
  float* reward = out.reward.data<float>();
  bool* terminated = out.terminated.data<bool>();
  bool* truncated = out.truncated.data<bool>();
  for (int64_t i = lo; i < hi; ++i) {
    double x = x_[i], x_dot = x_dot_[i], theta = theta_[i], theta_dot = theta_dot_[i];
    const double force = actions[i] == 1 ? kForceMag : -kForceMag;
    const double costheta = std::cos(theta);
    const double sintheta = std::sin(theta);
    const double temp = (force + kPoleMassLength * std::pow(theta_dot, 2.0) * sintheta) / kTotalMass;
    const double thetaacc = (kGravity * sintheta - costheta * temp) /
                            (kLength * (4.0 / 3.0 - kMassPole * std::pow(costheta, 2.0) / kTotalMass));
    const double xacc = temp - kPoleMassLength * thetaacc * costheta / kTotalMass;
    x = x + kTau * x_dot;
    x_dot = x_dot + kTau * xacc;
    theta = theta + kTau * theta_dot;
    theta_dot = theta_dot + kTau * thetaacc;

    const bool term = x < -kXThreshold || x > kXThreshold || theta < -kThetaThreshold || theta > kThetaThreshold;
    const bool trunc = ++elapsed_[i] >= kMaxEpisodeSteps;
    float* f = final_obs + 4 * i;
    f[0] = float(x), f[1] = float(x_dot), f[2] = float(theta), f[3] = float(theta_dot);
    reward[i] = 1.0f;
    terminated[i] = term;
    truncated[i] = trunc;
    if (term || trunc) {
      double s[4];
      detail::draw_uniform(gens_[i], 4, kResetLow, kResetHigh, s);
      x = s[0], x_dot = s[1], theta = s[2], theta_dot = s[3];
      elapsed_[i] = 0;
    }
    x_[i] = x, x_dot_[i] = x_dot, theta_[i] = theta, theta_dot_[i] = theta_dot;
    float* o = obs + 4 * i;
    o[0] = float(x), o[1] = float(x_dot), o[2] = float(theta), o[3] = float(theta_dot);
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
