// Time-major on-policy rollout storage (SPECS R3, spec 002): every field is
// preallocated [T, E, ...] once; a step writes its row t, GAE writes the
// advantages and returns in place, and flat() views the leading [T, E] as
// [T*E] without copying. Letters: T steps per rollout, E environments,
// N = T*E rows, M rows of a minibatch, O observation shape, A action shape.
//
//   rl::RolloutStorage rollout(128, env.num_envs(), env.spec().observation, env.spec().action);
//   rollout.insert(t, {.obs = obs, .actions = a, .log_probs = logp, .values = v});   // t = 0 .. T-1
//   rollout.insert_outcome(t, transition.reward, transition.terminated, transition.truncated);
//   rollout.compute_gae(last_values, 0.99, 0.95);
//   rl::RolloutBatch mb = rollout.gather(indices);                                 // [M] rows
#pragma once

#include <cstdint>

#include "kiln/core/generator.h"
#include "kiln/core/tensor.h"
#include "kiln/rl/env.h"

namespace kiln::rl {

/// The policy's side of one step: E rows each.
struct StepRecord {
  Tensor obs = {};      // [E, *O] f32: the observation the action was chosen from
  Tensor actions = {};  // [E] i64 (Discrete) or [E, *A] f32 (Box): what the environment got
  Tensor raw_actions = {};  // Box only: [E, *A] f32 before tanh (the log_prob carrier); undefined for Discrete
  Tensor log_probs = {};  // [E] f32
  Tensor values = {};     // [E] f32
};

/// Rows of a rollout: views of the storage (flat()) or gathered copies (gather()).
struct RolloutBatch {
  Tensor obs;          // [M, *O]
  Tensor actions;      // [M] i64 or [M, *A]
  Tensor raw_actions;  // [M, *A] (Box) or undefined
  Tensor log_probs, values, advantages, returns;  // [M]
  /// What the distribution's log_prob takes: raw_actions for Box, else actions.
  const Tensor& carriers() const { return raw_actions.defined() ? raw_actions : actions; }
};

class RolloutStorage {
 public:
  /// Discrete or Box action spaces; observations of any shape (f32).
  RolloutStorage(int64_t num_steps, int64_t num_envs, const Space& observation, const Space& action);

  int64_t num_steps() const { return steps_; }
  int64_t num_envs() const { return envs_; }
  int64_t size() const { return steps_ * envs_; }  // N

  /// Writes row t of obs, actions, raw_actions, log_probs and values (copies;
  /// shapes and dtypes checked against the spaces).
  void insert(int64_t t, const StepRecord& step);
  /// Writes row t of rewards [E], terminated [E] bool and truncated [E] bool.
  void insert_outcome(int64_t t, const Tensor& rewards, const Tensor& terminated, const Tensor& truncated);
  /// V(final_obs) [E] of step t, read where truncated[t] (a truncated episode
  /// is bootstrapped from it). Rows that were not truncated are ignored.
  void insert_final_values(int64_t t, const Tensor& values);

  /// Generalised advantage estimation (Schulman et al. 2016) over the
  /// whole rollout, into advantages and returns (= advantages + values):
  ///   next_t = 0 where terminated[t] (no bootstrap), final_values[t] where
  ///            truncated[t], else values[t+1] (last_values [E] for t = T-1)
  ///   delta_t = rewards[t] + gamma * next_t - values[t]
  ///   adv_t = delta_t + gamma * lambda * (1 - done_t) * adv_{t+1},  done = terminated | truncated
  void compute_gae(const Tensor& last_values, double gamma, double lambda);

  /// All N rows as views of the storage ([T, E, ...] -> [T*E, ...], no copy).
  RolloutBatch flat() const;
  /// Rows `indices` [M] i64 of flat() (gathered copies).
  RolloutBatch gather(const Tensor& indices) const;

  // The [T, E, ...] storage itself.
  const Tensor& obs() const { return obs_; }                    // [T, E, *O] f32
  const Tensor& actions() const { return actions_; }            // [T, E] i64 or [T, E, *A] f32
  const Tensor& raw_actions() const { return raw_actions_; }    // [T, E, *A] f32 (Box) or undefined
  const Tensor& log_probs() const { return log_probs_; }        // [T, E] f32
  const Tensor& values() const { return values_; }              // [T, E] f32
  const Tensor& rewards() const { return rewards_; }            // [T, E] f32
  const Tensor& terminated() const { return terminated_; }      // [T, E] bool
  const Tensor& truncated() const { return truncated_; }        // [T, E] bool
  const Tensor& final_values() const { return final_values_; }  // [T, E] f32
  const Tensor& advantages() const { return advantages_; }      // [T, E] f32
  const Tensor& returns() const { return returns_; }            // [T, E] f32

 private:
  void check_row(const char* op, int64_t t) const;

  int64_t steps_, envs_;
  Space observation_, action_;
  Tensor obs_, actions_, raw_actions_, log_probs_, values_, rewards_, terminated_, truncated_, final_values_,
      advantages_, returns_;
};

}  // namespace kiln::rl
