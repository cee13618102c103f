// Soft Actor-Critic for continuous actions (SPECS R9; Haarnoja et al. 2018),
// as CleanRL's sac_continuous_action.py with a fixed entropy coefficient
// alpha: a tanh-squashed Gaussian actor scaled to the action box, twin soft Q
// critics on [obs, action], target critics tracking them by polyak averaging,
// delayed policy updates and a replay buffer. Letters: E environments, B
// batch rows, O observation size, A action dims.
//
// Counters as DQN's (kiln/rl/dqn.h): `step` counts vector steps, global_step
// = step * E environment steps; total_timesteps and learning_starts are in
// environment steps, policy_frequency and target_network_frequency in vector
// steps. With E = 1 they are CleanRL's.
//
//   auto env = rl::make_vector_env("Pendulum-v1", 1);
//   rl::SAC sac(*env, {.total_timesteps = 30'000, .seed = 1});
//   sac.learn([](const rl::SACStats& s) { fmt::print("{} {}\n", s.global_step, s.mean_return); return true; });
//   rl::evaluate_policy(sac.deterministic_policy(), *eval_env, {.episodes = 10});
//
// Caller-owned networks, as PPO takes its ActorCritic:
//   Rngs rngs{{"params", 7}};
//   rl::SACActor actor(spec, nn::Init(rngs), 64);
//   rl::TwinQ critics(spec, nn::Init(rngs), 64), targets(spec, nn::Init(rngs), 64);
//   rl::SAC sac(*env, actor, critics, targets, {.total_timesteps = 20'000});   // targets start as copies
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/generator.h"
#include "kiln/io/checkpoint.h"
#include "kiln/nn/containers.h"
#include "kiln/nn/init.h"
#include "kiln/nn/linear.h"
#include "kiln/nn/module.h"
#include "kiln/optim/adam.h"
#include "kiln/rl/distributions.h"
#include "kiln/rl/env.h"
#include "kiln/rl/evaluate.h"
#include "kiln/rl/replay_buffer.h"

namespace kiln::train {
class CompiledStep;
}

namespace kiln::rl {

/// CleanRL's Actor: fc1, fc2 (ReLU, `hidden` wide), then fc_mean and
/// fc_logstd heads; log_std = min + (max - min) (tanh(fc_logstd(h)) + 1) / 2.
class SACActor : public nn::Module {
 public:
  SACActor(const EnvSpec& spec, const nn::Init& init, int64_t hidden = 256, double log_std_min = -5,
           double log_std_max = 2);
  /// [B, 2A]: the Gaussian's mean, then its log_std (spec 002's actor contract).
  Tensor forward(const Tensor& obs) const;
  /// The squashed Gaussian of observations [B, O], scaled to the action box.
  TanhGaussian distribution(const Tensor& obs) const;
  int64_t action_dim() const { return action_dim_; }

 private:
  nn::Shared<nn::Linear> fc1_, fc2_, fc_mean_, fc_logstd_;
  Space box_;
  int64_t obs_dim_ = 0, action_dim_ = 0;
  double log_std_min_, log_std_max_;
};

/// CleanRL's SoftQNetwork: fc1, fc2 (ReLU), fc3 on [obs, action] concatenated.
class SoftQNetwork : public nn::Module {
 public:
  SoftQNetwork(const EnvSpec& spec, const nn::Init& init, int64_t hidden = 256);
  /// Q(obs [B, O], action [B, A]), [B].
  Tensor forward(const Tensor& obs, const Tensor& action) const;

 private:
  nn::Shared<nn::Linear> fc1_, fc2_, fc3_;
  int64_t obs_dim_ = 0, action_dim_ = 0;
};

/// The twin critics, children "qf1" and "qf2": one module so one Adam and one
/// polyak update cover both.
class TwinQ : public nn::Module {
 public:
  TwinQ(const EnvSpec& spec, const nn::Init& init, int64_t hidden = 256);
  nn::Shared<SoftQNetwork> qf1, qf2;
};

/// CleanRL's argument names and sac_continuous_action.py's defaults, with
/// alpha fixed (its autotune off).
struct SACOptions {
  int64_t total_timesteps = 1'000'000;  // environment steps of the run
  int64_t buffer_size = 1'000'000;
  double gamma = 0.99;
  double tau = 0.005;                   // target <- tau * online + (1 - tau) * target
  int64_t batch_size = 256;
  int64_t learning_starts = 5'000;      // environment steps of uniform random actions before updates
  double policy_lr = 3e-4;
  double q_lr = 1e-3;
  int64_t policy_frequency = 2;         // every this many vector steps, this many actor updates (TD3's delay)
  int64_t target_network_frequency = 1; // vector steps between target updates
  double alpha = 0.2;                   // the fixed entropy coefficient
  int64_t hidden = 256;                 // width of the actor's and critics' two layers
  uint64_t seed = 1;                    // network init, actions, replay sampling, environment resets
  bool compile = false;                 // critic and actor steps recorded once and replayed (docs/compile.md); same results

  void validate() const;
};

/// Figures of a window of steps (learn()'s stats_every vector steps).
struct SACStats {
  int64_t step = 0, global_step = 0;
  int64_t updates = 0;         // critic updates so far
  double qf_loss = 0;          // mean of qf1_loss + qf2_loss over the window's critic updates (NaN when none)
  double qf1_value = 0;        // mean Q1(s, a) of the sampled rows
  double actor_loss = 0;       // mean over the window's actor updates (NaN when none)
  double entropy = 0;          // mean -log_pi of the actor updates' actions
  int64_t episodes = 0;
  double mean_return = 0, mean_length = 0;  // of the episodes that ended in the window (NaN when none)
  double seconds = 0;
};

/// One critic update's figures.
struct SACCriticUpdate {
  double qf1_loss = 0, qf2_loss = 0;
  double qf1_value = 0, qf2_value = 0;  // batch means of Q(s, a)
};

/// One actor update's figures.
struct SACActorUpdate {
  double actor_loss = 0;
  double log_pi = 0;  // batch mean
};

class SAC : public io::Stateful {
 public:
  /// Builds the actor, twin critics and their targets (copies) from
  /// Rngs(seed), two Adams (actor: policy_lr; critics: q_lr) and the buffer,
  /// and resets env with the seed. env must outlive the SAC and have Box([O])
  /// observations and bounded Box([A]) actions.
  SAC(VectorEnv& env, const SACOptions& options = {});
  /// The same over caller-owned networks (options.hidden unused):
  /// target_critics start as a copy of critics (the same architecture, or a
  /// kiln::Error naming the key). All must outlive the SAC, the critics and
  /// targets be distinct objects, and the actor's action size the environment's.
  SAC(VectorEnv& env, SACActor& actor, TwinQ& critics, TwinQ& target_critics, const SACOptions& options = {});
  ~SAC() override;

  /// One vector step: uniform random actions before learning_starts, then
  /// sampled ones; the transitions into the buffer; then (past
  /// learning_starts) a critic update, the delayed actor updates and the
  /// target update.
  void step();
  /// Steps until total_timesteps; on_stats as DQN::learn.
  void learn(const std::function<bool(const SACStats&)>& on_stats = {}, int64_t stats_every = 1000);

  /// One critic step on `batch`: y = r + gamma (1 - terminated) (min(Q1', Q2')(s', a') - alpha log pi(a'|s')),
  /// a' drawn with standard normal noise `next_noise` [B, A] (from the
  /// generator when undefined); loss mse(Q1(s, a), y) + mse(Q2(s, a), y).
  SACCriticUpdate update_critics(const ReplayBatch& batch, const Tensor& next_noise = {});
  /// One actor step: mean(alpha log pi(a~|s) - min(Q1, Q2)(s, a~)), a~
  /// reparameterised with noise `noise` [B, A] (from the generator when undefined).
  SACActorUpdate update_actor(const ReplayBatch& batch, const Tensor& noise = {});
  /// Polyak-averages both target critics toward the critics.
  void update_targets();

  /// Actions [B, A] of observations [B, O]: the squashed mean (no grad).
  Tensor act(const Tensor& obs);
  Policy deterministic_policy();
  /// As DQN::restart_episodes: fresh episodes from the seed a resume from
  /// this step uses.
  void restart_episodes();

  bool done() const { return step_ >= num_steps_; }
  int64_t steps() const { return step_; }
  int64_t global_step() const { return step_ * env_.num_envs(); }
  const SACOptions& options() const { return options_; }
  SACActor& actor() { return *actor_; }
  TwinQ& critics() { return *critics_; }
  TwinQ& target_critics() { return *targets_; }
  optim::Adam& actor_optimizer() { return *actor_opt_; }
  optim::Adam& q_optimizer() { return *q_opt_; }
  ReplayBuffer& replay_buffer() { return buffer_; }
  /// options.compile: the compiled critic and actor steps (null before their first update).
  const train::CompiledStep* compiled_critic_step() const { return compiled_critics_.get(); }
  const train::CompiledStep* compiled_actor_step() const { return compiled_actor_.get(); }

  /// Registers the whole run: "<name>.actor", "<name>.critics",
  /// "<name>.targets", "<name>.actor_optim", "<name>.q_optim",
  /// "<name>.replay" and this object's state "<name>".
  void checkpoint(io::Checkpoint& ckpt, const std::string& name = "sac");
  io::State state() const override;
  /// As DQN::load_state: checks first, then fresh episodes from a seed
  /// derived from (seed, step).
  void load_state(const io::State& state) override;

 private:
  void setup(SACActor& actor, TwinQ& critics, TwinQ& targets);  // what both constructors share
  void reset_env(uint64_t seed);
  // a~ = squash(mean + std * noise) and log pi(a~) [B], differentiable.
  std::pair<Tensor, Tensor> sample_action(const Tensor& obs, const Tensor& noise, const char* what);
  SACStats take_window();
  // update_critics' and update_actor's arithmetic; their figures as tensors
  // ({l1, l2, mean q1, mean q2} and {loss, mean log pi}), read after the step.
  std::vector<Tensor> critic_step(const ReplayBatch& batch, const Tensor& next_noise);
  std::vector<Tensor> actor_step(const ReplayBatch& batch, const Tensor& noise);
  // Runs `step` compiled (options.compile) or eagerly on the batch and noise.
  std::vector<Tensor> run_step(std::unique_ptr<train::CompiledStep>& compiled,
                               std::vector<Tensor> (SAC::*step)(const ReplayBatch&, const Tensor&),
                               const ReplayBatch& batch, const Tensor& noise);

  VectorEnv& env_;
  SACOptions options_;
  int64_t num_steps_ = 0;
  int64_t step_ = 0, updates_ = 0;
  std::unique_ptr<SACActor> own_actor_;             // the networks SAC(env, options) builds
  std::unique_ptr<TwinQ> own_critics_, own_targets_;
  SACActor* actor_ = nullptr;                       // own_actor_ or the caller's, likewise below
  TwinQ* critics_ = nullptr;
  TwinQ* targets_ = nullptr;
  std::unique_ptr<optim::Adam> actor_opt_, q_opt_;
  std::unique_ptr<train::CompiledStep> compiled_critics_, compiled_actor_;  // options.compile
  ReplayBuffer buffer_;
  Generator action_gen_, sample_gen_, noise_gen_;
  Tensor obs_;
  std::vector<double> episode_return_;
  std::vector<int64_t> episode_length_;
  double qf_sum_ = 0, q1_sum_ = 0, actor_sum_ = 0, logpi_sum_ = 0, return_sum_ = 0, length_sum_ = 0;
  int64_t window_critic_ = 0, window_actor_ = 0, window_episodes_ = 0;
};

}  // namespace kiln::rl
