// Pendulum-v1: Gymnasium's classic_control/pendulum.py (PendulumEnv.step,
// _get_obs, reset, angle_normalize) under wrappers/time_limit.py's
// TimeLimit(200), for E copies at once. Compiled like cartpole.cpp
// (-ffp-contract=off, -fno-builtin-pow): Gymnasium's expressions in their
// order, glibc's sin, cos and pow(v, 2.0), Python's float modulo; the
// reference is tools/goldens/rl_envs.py. With NumPy 1.x the clipped f32
// torque enters every operation as the f64 of its value, as here.
#include "kiln/rl/pendulum.h"

#include <cmath>
#include <limits>
#include <numbers>

#include "kiln/core/error.h"
#include "kiln/ops/creation.h"
#include "src/rl/native_env.h"

namespace kiln::rl {

namespace {

constexpr double kPi = std::numbers::pi;
constexpr double kMaxSpeed = 8;
constexpr double kMaxTorque = 2.0;
constexpr double kDt = 0.05;
constexpr double kG = 10.0;
constexpr double kM = 1.0;
constexpr double kL = 1.0;
constexpr int64_t kMaxEpisodeSteps = 200;
constexpr double kResetLow[2] = {-kPi, -1.0};
constexpr double kResetHigh[2] = {kPi, 1.0};

/// Python's float `x % y`: fmod with the result's sign moved to y's.
double python_mod(double x, double y) {
  double m = std::fmod(x, y);
  if (m != 0) {
    if ((y < 0) != (m < 0)) m += y;
  } else {
    m = std::copysign(0.0, y);
  }
  return m;
}

double angle_normalize(double x) { return python_mod(x + kPi, 2 * kPi) - kPi; }

/// np.clip(v, lo, hi) (NaN stays NaN).
double clip(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }

void write_obs(double theta, double theta_dot, float* o) {
  o[0] = float(std::cos(theta)), o[1] = float(std::sin(theta)), o[2] = float(theta_dot);
}

EnvSpec pendulum_spec() {
  return EnvSpec{.name = "Pendulum-v1",
                 .observation = Space::box({3}, {-1, -1, -kMaxSpeed}, {1, 1, kMaxSpeed}),
                 .action = Space::box({1}, {-kMaxTorque}, {kMaxTorque}),
                 .max_episode_steps = kMaxEpisodeSteps,
                 .reward_threshold = std::numeric_limits<double>::quiet_NaN()};
}

}  // namespace

Pendulum::Pendulum(int64_t num_envs) : spec_(pendulum_spec()), num_envs_(num_envs) {
  KILN_CHECK(num_envs > 0, "Pendulum", "num_envs must be positive, got {}", num_envs);
  theta_.assign(size_t(num_envs), 0.0);
  theta_dot_.assign(size_t(num_envs), 0.0);
  elapsed_.assign(size_t(num_envs), 0);
  gens_.assign(size_t(num_envs), Generator(0));
}

Tensor Pendulum::reset(uint64_t seed) {
  Tensor obs = Tensor::empty({num_envs_, 3}, kF32);
  float* o = obs.data<float>();
  for (int64_t i = 0; i < num_envs_; ++i) {
    gens_[i] = env_generator(seed, i);
    double s[2];
    detail::draw_uniform(gens_[i], 2, kResetLow, kResetHigh, s);
    theta_[i] = s[0], theta_dot_[i] = s[1];
    write_obs(s[0], s[1], o + 3 * i);
    elapsed_[i] = 0;
  }
  was_reset_ = true;
  return obs;
}

// PendulumEnv.step for every copy (a few thousand at most in practice: serial).
Transition Pendulum::step(const Tensor& actions) {
  constexpr const char* op = "Pendulum.step";
  detail::check_actions(op, spec_, num_envs_, was_reset_, actions);
  const Tensor a = actions.contiguous();
  const float* act = a.data<float>();
  for (int64_t i = 0; i < num_envs_; ++i)
    KILN_CHECK(!std::isnan(act[i]), op, "actions[{}, 0] is NaN: {} takes torques in [-2, 2] (others are clipped)", i,
               spec_.name);
  Transition out = detail::empty_transition(spec_, num_envs_);
  float* obs = out.obs.data<float>();
  float* final_obs = out.final_obs.data<float>();
  float* reward = out.reward.data<float>();
  bool* terminated = out.terminated.data<bool>();
  bool* truncated = out.truncated.data<bool>();
  for (int64_t i = 0; i < num_envs_; ++i) {
    const double th = theta_[i], thdot = theta_dot_[i];
    const double u = clip(act[i], -kMaxTorque, kMaxTorque);
    const double costs = std::pow(angle_normalize(th), 2.0) + 0.1 * std::pow(thdot, 2.0) + 0.001 * std::pow(u, 2.0);
    double newthdot = thdot + (3 * kG / (2 * kL) * std::sin(th) + 3.0 / (kM * std::pow(kL, 2.0)) * u) * kDt;
    newthdot = clip(newthdot, -kMaxSpeed, kMaxSpeed);
    double newth = th + newthdot * kDt;
    reward[i] = float(-costs);
    terminated[i] = false;
    const bool trunc = ++elapsed_[i] >= kMaxEpisodeSteps;
    truncated[i] = trunc;
    write_obs(newth, newthdot, final_obs + 3 * i);
    if (trunc) {
      double s[2];
      detail::draw_uniform(gens_[i], 2, kResetLow, kResetHigh, s);
      newth = s[0], newthdot = s[1];
      elapsed_[i] = 0;
    }
    theta_[i] = newth, theta_dot_[i] = newthdot;
    write_obs(newth, newthdot, obs + 3 * i);
  }
  return out;
}

Tensor Pendulum::state() const {
  Tensor out = Tensor::empty({num_envs_, 2}, kF64);
  double* s = out.data<double>();
  for (int64_t i = 0; i < num_envs_; ++i) s[2 * i] = theta_[i], s[2 * i + 1] = theta_dot_[i];
  return out;
}

Tensor Pendulum::set_state(const Tensor& state) {
  detail::check_state("Pendulum.set_state", num_envs_, was_reset_, state, 2, "theta, theta_dot");
  const Tensor c = state.contiguous();
  const double* s = c.data<double>();
  Tensor obs = Tensor::empty({num_envs_, 3}, kF32);
  for (int64_t i = 0; i < num_envs_; ++i) {
    theta_[i] = s[2 * i], theta_dot_[i] = s[2 * i + 1];
    write_obs(theta_[i], theta_dot_[i], obs.data<float>() + 3 * i);
  }
  return obs;
}

Tensor Pendulum::elapsed_steps() const { return tensor(elapsed_); }

}  // namespace kiln::rl
