// CartPole: Gymnasium's CartPole-v1 (classic_control/cartpole.py under
// TimeLimit(500)) as a vector environment of E copies, bit for bit. Letters:
// E environments.
//
//   rl::CartPole env(8);
//   Tensor obs = env.reset(/*seed=*/0);                  // [8, 4] f32: x, x_dot, theta, theta_dot
//   rl::Transition t = env.step(zeros({8}, {.dtype = kI64}));  // 0 pushes left, 1 right
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/generator.h"
#include "kiln/rl/env.h"

namespace kiln::rl {

/// E copies of CartPole-v1. The dynamics are Gymnasium's, operation by
/// operation in f64 (Euler integrator; gravity 9.8, cart mass 1.0, pole mass
/// 0.1, half-length 0.5, force 10, tau 0.02): an episode terminates once
/// |x| > 2.4 or |theta| > 12 degrees, is truncated at its 500th step, and
/// earns 1 per step including the last. The observation is the f32 cast of
/// the f64 state. reset(seed) draws each copy's state from U(-0.05, 0.05)^4
/// with env_generator(seed, i); automatic resets continue that stream.
/// Actions: Discrete(2), [E] i64; anything else is an error.
class CartPole final : public VectorEnv {
 public:
  explicit CartPole(int64_t num_envs);

  const EnvSpec& spec() const override { return spec_; }
  int64_t num_envs() const override { return num_envs_; }
  Tensor reset(uint64_t seed) override;
  Transition step(const Tensor& actions) override;

  /// The physics state, [E, 4] f64 (x, x_dot, theta, theta_dot), a copy.
  Tensor state() const;
  /// Replaces the physics state ([E, 4] f64) after a reset, as assigning
  /// Gymnasium's env.unwrapped.state does; episode step counts and the random
  /// streams are kept. Returns the new observation [E, 4] f32.
  Tensor set_state(const Tensor& state);
  /// Steps taken in each copy's current episode, [E] i64.
  Tensor elapsed_steps() const;

 private:
  void step_range(int64_t lo, int64_t hi, const int64_t* actions, const Transition& out);

  EnvSpec spec_;
  int64_t num_envs_;
  bool was_reset_ = false;
  // Structure of arrays, [E] each: the step is one pass over contiguous f64 rows.
  std::vector<double> x_, x_dot_, theta_, theta_dot_;
  std::vector<int64_t> elapsed_;
  std::vector<Generator> gens_;  // copy i's reset stream
};

}  // namespace kiln::rl
