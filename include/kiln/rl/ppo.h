// Proximal Policy Optimization (SPECS R4, R5; Schulman et al. 2017), as
// CleanRL's ppo.py and ppo_continuous_action.py: a synchronous loop of two
// phases over a caller-owned vector environment and ActorCritic.
//   collect: T steps of E environments into the preallocated RolloutStorage
//            under no-grad, then GAE (truncated episodes bootstrapped from
//            V(final_obs), terminated ones not).
//   update:  update_epochs passes over the N = T*E rows in num_minibatches
//            shuffled minibatches: clipped surrogate, (clipped) value loss,
//            entropy bonus, per-minibatch advantage normalisation, global
//            gradient-norm clipping, one Adam step each.
// Discrete action spaces use a Categorical, Box([A]) ones a TanhGaussian whose
// raw (pre-tanh) actions are stored and re-evaluated. Every random draw comes
// from Generators derived from options.seed, so a run is reproducible.
//
//   rl::MlpActorCritic agent(env.spec(), rngs);
//   rl::PPO ppo(env, agent, {.total_timesteps = 200'000, .seed = 1});
//   ppo.learn([](const rl::PPOStats& s) { fmt::print("{} {}\n", s.global_step, s.mean_return); return true; });
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kiln/core/generator.h"
#include "kiln/io/checkpoint.h"
#include "kiln/optim/adam.h"
#include "kiln/rl/actor_critic.h"
#include "kiln/rl/distributions.h"
#include "kiln/rl/env.h"
#include "kiln/rl/normalization.h"
#include "kiln/rl/rollout.h"

namespace kiln::train {
class CompiledStep;
}

namespace kiln::rl {

/// CleanRL's argument names and ppo.py's defaults.
struct PPOOptions {
  int64_t total_timesteps = 500'000;  // environment steps (all copies) of the run: the iteration count and LR schedule
  double learning_rate = 2.5e-4;
  int64_t num_steps = 128;            // T: steps per environment per rollout
  bool anneal_lr = true;              // lr falls linearly to 0 over the iterations
  double gamma = 0.99;
  double gae_lambda = 0.95;
  int64_t num_minibatches = 4;        // must divide N = num_steps * num_envs
  int64_t update_epochs = 4;
  bool norm_adv = true;               // advantages normalised per minibatch (mean 0, std 1)
  double clip_coef = 0.2;
  bool clip_vloss = true;             // value loss max((v - R)^2, (v_old + clip(v - v_old) - R)^2) / 2
  double ent_coef = 0.01;
  double vf_coef = 0.5;
  double max_grad_norm = 0.5;         // global L2 norm of all gradients
  double target_kl = 0;               // > 0: stop an update after the epoch whose approx_kl exceeds it
  double adam_eps = 1e-5;
  bool norm_reward = false;           // rewards scaled by a RewardScaler (continuous control)
  uint64_t seed = 1;                  // action sampling, minibatch order, environment resets
  bool compile = false;               // minibatch updates recorded once and replayed (docs/compile.md); same results

  void validate() const;
};

/// One iteration's figures. Losses are means over its minibatches.
struct PPOStats {
  int64_t iteration = 0;    // iterations completed, counting this one
  int64_t global_step = 0;  // environment steps so far
  double learning_rate = 0;
  double policy_loss = 0, value_loss = 0, entropy = 0;
  double approx_kl = 0;     // mean of (ratio - 1) - log ratio (Schulman's k3 estimator)
  double clipfrac = 0;      // fraction of rows with |ratio - 1| > clip_coef
  double explained_variance = 0;  // 1 - var(returns - values) / var(returns) over the rollout
  int64_t episodes = 0;     // episodes that ended during this rollout
  double mean_return = 0;   // their mean undiscounted return and length (NaN when none ended)
  double mean_length = 0;
  double collect_seconds = 0, update_seconds = 0;
};

/// The loss of one minibatch and its diagnostics.
struct PPOLoss {
  Tensor loss;         // scalar: policy_loss + vf_coef * value_loss - ent_coef * entropy
  Tensor policy_loss;  // scalar: mean of max(-adv * ratio, -adv * clip(ratio, 1 - c, 1 + c))
  Tensor value_loss;   // scalar: (clipped) squared error / 2
  Tensor entropy;      // scalar mean entropy; undefined when ent_coef is 0 (not computed)
  double approx_kl = 0;  // mean of (ratio - 1) - log ratio
  double clipfrac = 0;   // fraction of rows with |ratio - 1| > clip_coef
};

/// CleanRL's PPO loss (ppo.py's update) for minibatch b, given the current
/// policy's distribution `pi` and values [M] on b.obs. Differentiable in pi's
/// parameters and `values`.
PPOLoss ppo_loss(const ActionDistribution& pi, const Tensor& values, const RolloutBatch& b, const PPOOptions& o);

class PPO : public io::Stateful {
 public:
  /// Resets env with options.seed; builds the rollout storage and an Adam
  /// (learning_rate, adam_eps) over agent's parameters. The env and agent
  /// must outlive the PPO.
  PPO(VectorEnv& env, ActorCritic& agent, const PPOOptions& options = {});
  ~PPO() override;

  /// One iteration: the learning rate for it, collect(), update().
  PPOStats iterate();
  /// Iterations until total_timesteps is reached; on_iteration runs after each
  /// and stops the loop by returning false.
  void learn(const std::function<bool(const PPOStats&)>& on_iteration = {});

  /// Phase 1: fills the rollout and computes GAE.
  void collect();
  /// Phase 2: the epochs of minibatch updates on the collected rollout.
  PPOStats update();

  bool done() const { return iteration_ >= num_iterations_; }
  int64_t iteration() const { return iteration_; }
  int64_t num_iterations() const { return num_iterations_; }
  int64_t global_step() const { return global_step_; }
  const PPOOptions& options() const { return options_; }
  optim::Adam& optimizer() { return *optimizer_; }
  const RolloutStorage& rollout() const { return rollout_; }
  ActorCritic& agent() { return agent_; }
  /// options.compile: the compiled minibatch update (null before the first update).
  const train::CompiledStep* compiled_step() const { return compiled_.get(); }

  /// Progress, generator states and the reward scaler's statistics.
  io::State state() const override;
  /// Restores them (checking everything first) and resets the environment
  /// with a seed derived from (seed, iteration): the environments' own state
  /// is not part of the contract, so a resumed run starts fresh episodes.
  void load_state(const io::State& state) override;
  /// Starts fresh episodes now, as load_state does: resets the environment
  /// with the seed derived from (seed, iteration). A job that calls this
  /// whenever it saves makes its resumed runs equal uninterrupted ones.
  void restart_episodes();

 private:
  void reset_env(uint64_t seed);
  double learning_rate_for(int64_t iteration) const;

  VectorEnv& env_;
  ActorCritic& agent_;
  PPOOptions options_;
  int64_t num_iterations_ = 0;
  int64_t iteration_ = 0;
  int64_t global_step_ = 0;
  std::unique_ptr<optim::Adam> optimizer_;
  RolloutStorage rollout_;
  Generator action_gen_, minibatch_gen_;
  std::unique_ptr<RewardScaler> reward_scaler_;
  Tensor next_obs_;                      // [E, *O]
  std::vector<double> episode_return_;   // [E] running undiscounted returns
  std::vector<int64_t> episode_length_;  // [E]
  PPOStats pending_;                     // the collection's half of the next stats
  std::unique_ptr<train::CompiledStep> compiled_;  // options.compile: the minibatch update
};

}  // namespace kiln::rl
