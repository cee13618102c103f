// Deterministic evaluation of a policy (SPECS R6): the mode action (argmax,
// or the squashed mean) on a separate vector environment until N episodes
// have ended, and the mean and standard deviation of their returns.
//
//   rl::EvaluationResult r = rl::evaluate_policy(agent, eval_env, {.episodes = 10, .seed = 123});
//   fmt::print("{:.1f} +- {:.1f}\n", r.mean_return, r.std_return);
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kiln/rl/actor_critic.h"
#include "kiln/rl/env.h"

namespace kiln::rl {

struct EvaluationOptions {
  int64_t episodes = 10;
  uint64_t seed = 0;           // the environment's reset seed
  bool deterministic = true;   // mode actions; false: sampled from a Generator(seed)
  int64_t max_steps = 1'000'000;  // vector steps before giving up (an episode that never ends)
};

struct EvaluationResult {
  double mean_return = 0;
  double std_return = 0;  // population std (numpy's default), as Stable-Baselines3's evaluate_policy
  double mean_length = 0;
  std::vector<double> returns;   // per episode, in the order they ended
  std::vector<int64_t> lengths;
  int64_t env_steps = 0;         // environment steps taken (all copies)
};

/// Runs `agent` on `env` (reset with options.seed) under no-grad and in eval
/// mode (restored after). Environment i contributes (episodes + i) / E of the
/// episodes (Stable-Baselines3's split), so that the copies with short
/// episodes do not crowd out the long ones; the others keep stepping with
/// their results ignored.
EvaluationResult evaluate_policy(ActorCritic& agent, VectorEnv& env, const EvaluationOptions& options = {});

/// Any policy: observations [E, *O] -> the environment's actions [E, *A]
/// (DQN's greedy one, SAC's squashed mean, a scripted one).
using Policy = std::function<Tensor(const Tensor& obs)>;

/// The same loop over a policy function, called under no-grad;
/// options.deterministic does not apply (the policy decides).
EvaluationResult evaluate_policy(const Policy& policy, VectorEnv& env, const EvaluationOptions& options = {});

}  // namespace kiln::rl
