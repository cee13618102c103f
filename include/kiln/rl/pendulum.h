// Pendulum: Gymnasium's Pendulum-v1 (classic_control/pendulum.py under
// TimeLimit(200)) as a vector environment of E copies, bit for bit. Letters:
// E environments.
//
//   rl::Pendulum env(4);
//   Tensor obs = env.reset(/*seed=*/0);              // [4, 3] f32: cos theta, sin theta, theta_dot
//   rl::Transition t = env.step(full({4, 1}, 0.5));  // torques in [-2, 2]
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/generator.h"
#include "kiln/rl/env.h"

namespace kiln::rl {

/// E copies of Pendulum-v1 (swing-up; theta = 0 is upright). The dynamics
/// are Gymnasium's, operation by operation in f64 (g = 10, m = 1, l = 1,
/// dt = 0.05): the torque is clipped to [-2, 2], the reward is
/// -(angle_normalize(theta)^2 + 0.1 theta_dot^2 + 0.001 u^2) of the state
/// before the step, theta_dot is clipped to [-8, 8]. Episodes never
/// terminate and are truncated at their 200th step. The observation is
/// [cos theta, sin theta, theta_dot] cast to f32. reset(seed) draws theta
/// from U(-pi, pi) and theta_dot from U(-1, 1) with env_generator(seed, i);
/// automatic resets continue that stream. Actions: Box([1], -2, 2), [E, 1]
/// f32; values outside the bounds are clipped as Gymnasium clips them, NaN is
/// an error.
class Pendulum final : public VectorEnv {
 public:
  explicit Pendulum(int64_t num_envs);

  const EnvSpec& spec() const override { return spec_; }
  int64_t num_envs() const override { return num_envs_; }
  Tensor reset(uint64_t seed) override;
  Transition step(const Tensor& actions) override;

  /// The physics state, [E, 2] f64 (theta, theta_dot), a copy. theta is not
  /// wrapped: it keeps counting turns, as Gymnasium's does.
  Tensor state() const;
  /// Replaces the physics state ([E, 2] f64) after a reset, as assigning
  /// Gymnasium's env.unwrapped.state does; episode step counts and the random
  /// streams are kept. Returns the new observation [E, 3] f32.
  Tensor set_state(const Tensor& state);
  /// Steps taken in each copy's current episode, [E] i64.
  Tensor elapsed_steps() const;

 private:
  EnvSpec spec_;
  int64_t num_envs_;
  bool was_reset_ = false;
  std::vector<double> theta_, theta_dot_;  // [E] each
  std::vector<int64_t> elapsed_;
  std::vector<Generator> gens_;  // copy i's reset stream
};

}  // namespace kiln::rl
