// Deep Q-learning (SPECS R8; Mnih et al. 2015), as CleanRL's dqn.py: an
// online and a target Q network, a linear epsilon-greedy schedule, a replay
// buffer, a squared (CleanRL's) or Huber (smooth L1) TD loss and Adam,
// optionally double DQN (van Hasselt et al. 2016). Letters: E environments, B batch rows, O observation
// size, n actions.
//
// Counters follow CleanRL's loop, which steps one environment: `step` counts
// vector steps (E environment steps each) and global_step = step * E counts
// environment steps. total_timesteps, learning_starts and the epsilon
// schedule are in environment steps; train_frequency and
// target_network_frequency in vector steps. With E = 1 both are CleanRL's.
//
//   auto env = rl::make_vector_env("CartPole-v1", 1);
//   rl::DQN dqn(*env, {.total_timesteps = 200'000, .seed = 1});
//   dqn.learn([&](const rl::DQNStats& s) { fmt::print("{} {}\n", s.global_step, s.td_loss); return true; });
//   rl::evaluate_policy(dqn.greedy_policy(), *eval_env, {.episodes = 10});
//
// Caller-owned networks, as PPO takes its ActorCritic (any widths, any init):
//   Rngs rngs{{"params", 7}};
//   rl::QNetwork q(env->spec(), nn::Init(rngs), {64, 64}), target(env->spec(), nn::Init(rngs), {64, 64});
//   rl::DQN dqn(*env, q, target, {.total_timesteps = 50'000});   // target starts as a copy of q
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
#include "kiln/nn/module.h"
#include "kiln/optim/adam.h"
#include "kiln/rl/env.h"
#include "kiln/rl/evaluate.h"
#include "kiln/rl/replay_buffer.h"

namespace kiln::train {
class CompiledStep;
}

namespace kiln::rl {

/// CleanRL's QNetwork: Linear-ReLU layers through `hidden`, then a Linear to
/// the n action values. Keys network.{0,2,4}.{weight,bias} as in PyTorch (two
/// hidden layers); weights from the Init (kiln's default: PyTorch's
/// fan-in uniform; biases zero).
class QNetwork : public nn::Module {
 public:
  QNetwork(const EnvSpec& spec, const nn::Init& init, const std::vector<int64_t>& hidden = {120, 84});
  /// Q-values [B, n] of observations [B, O].
  Tensor forward(const Tensor& obs) const;
  int64_t num_actions() const { return num_actions_; }

 private:
  nn::Shared<nn::Sequential> network_;
  int64_t obs_dim_ = 0, num_actions_ = 0;
};

/// CleanRL's argument names and dqn.py's defaults, plus the documented
/// additions (off by default).
struct DQNOptions {
  int64_t total_timesteps = 500'000;  // environment steps of the run (all copies)
  double learning_rate = 2.5e-4;
  int64_t buffer_size = 10'000;       // replay capacity, transitions
  double gamma = 0.99;
  double tau = 1.0;                   // target <- tau * online + (1 - tau) * target (1: a copy)
  int64_t target_network_frequency = 500;  // vector steps between target updates
  int64_t batch_size = 128;
  double start_e = 1.0;               // epsilon falls linearly from start_e to end_e
  double end_e = 0.05;
  double exploration_fraction = 0.5;  // ... over this fraction of total_timesteps, then stays
  int64_t learning_starts = 10'000;   // environment steps of pure collection before the first update
  int64_t train_frequency = 10;       // vector steps between updates
  bool huber = false;                 // smooth L1 (beta 1) TD loss; false: CleanRL's MSE (see docs/rl_offpolicy.md)
  bool double_q = false;              // the online network picks the next action, the target values it
  double max_grad_norm = 0;           // > 0: clip the global gradient norm before each step
  double adam_eps = 1e-8;
  std::vector<int64_t> hidden = {120, 84};  // QNetwork layers
  uint64_t seed = 1;                  // network init, exploration, replay sampling, environment resets
  bool compile = false;               // the gradient step recorded once and replayed (docs/compile.md); same results

  void validate() const;
};

/// CleanRL's linear_schedule: start + (end - start) * t / duration, held at
/// `end` once t >= duration (duration <= 0: `end` at once).
double linear_schedule(double start, double end, double duration, double t);

/// Figures of a window of steps (learn()'s stats_every vector steps).
struct DQNStats {
  int64_t step = 0;          // vector steps so far
  int64_t global_step = 0;   // environment steps so far
  double epsilon = 0;        // at the window's last step
  int64_t updates = 0;       // gradient steps so far
  double td_loss = 0;        // mean over the window's updates (NaN when none)
  double q_value = 0;        // mean Q(s, a) of the sampled actions, same rows
  int64_t episodes = 0;      // episodes that ended in the window
  double mean_return = 0;    // their mean undiscounted return and length (NaN when none)
  double mean_length = 0;
  double seconds = 0;        // wall time of the window
};

/// One gradient step's figures.
struct DQNUpdate {
  double td_loss = 0;
  double q_value = 0;
};

/// The TD loss of a batch (differentiable in `q`): q [B, n] the online values
/// of batch.obs; next_q [B, n] the target network's values of batch.next_obs;
/// next_online_q [B, n] the online ones (double DQN picks its action with
/// them; undefined otherwise). target = r + gamma * (1 - terminated) * Q'(s',
/// a'), a' = argmax of next_online_q (double) or next_q's max, no gradient.
/// Returns {loss, Q(s, a) [B]}.
std::pair<Tensor, Tensor> dqn_loss(const Tensor& q, const Tensor& next_q, const Tensor& next_online_q,
                                   const ReplayBatch& batch, const DQNOptions& options);

class DQN : public io::Stateful {
 public:
  /// Builds the online network (Rngs(seed)), the target as its copy, Adam
  /// and the replay buffer, and resets env with the seed. env must outlive
  /// the DQN and have Box([O]) observations and Discrete(n) actions.
  DQN(VectorEnv& env, const DQNOptions& options = {});
  /// The same over caller-owned networks (options.hidden unused): q learns,
  /// target starts as its copy (load_state_dict: the same architecture, or a
  /// kiln::Error naming the key). Both must outlive the DQN and be distinct
  /// objects, and q's actions must be the environment's.
  DQN(VectorEnv& env, QNetwork& q_network, QNetwork& target_network, const DQNOptions& options = {});
  ~DQN() override;

  /// One vector step: epsilon-greedy actions, the environment step, the
  /// transitions into the buffer, then an update (every train_frequency
  /// steps once learning_starts is past) and a target update (every
  /// target_network_frequency steps).
  void step();
  /// Steps until total_timesteps; every `stats_every` vector steps (and at
  /// the end) on_stats gets the window's figures and stops the run by
  /// returning false.
  void learn(const std::function<bool(const DQNStats&)>& on_stats = {}, int64_t stats_every = 1000);
  /// One gradient step on `batch` (what step() does with a sampled one).
  DQNUpdate update(const ReplayBatch& batch);
  /// target <- tau * online + (1 - tau) * target, parameter by parameter.
  void update_target();

  /// Epsilon at environment step `global_step`.
  double epsilon(int64_t global_step) const;
  /// The greedy actions [B] i64 of observations [B, O] (no grad).
  Tensor act(const Tensor& obs);
  /// act() as a policy for evaluate_policy; valid while the DQN lives.
  Policy greedy_policy();
  /// Drops the episodes in progress and resets the environment with the seed
  /// a resume from this step uses (load_state): a job that calls it whenever
  /// it saves makes its resumed runs equal uninterrupted ones.
  void restart_episodes();

  bool done() const { return step_ >= num_steps_; }
  int64_t steps() const { return step_; }
  int64_t global_step() const { return step_ * env_.num_envs(); }
  int64_t updates() const { return updates_; }
  const DQNOptions& options() const { return options_; }
  QNetwork& q_network() { return *q_; }
  QNetwork& target_network() { return *target_; }
  optim::Adam& optimizer() { return *optimizer_; }
  ReplayBuffer& replay_buffer() { return buffer_; }
  /// options.compile: the compiled gradient step (null before the first update).
  const train::CompiledStep* compiled_step() const { return compiled_.get(); }

  /// Registers the whole run with a checkpoint: the networks ("<name>.q",
  /// "<name>.target"), Adam ("<name>.optim"), the buffer ("<name>.replay")
  /// and this object's state ("<name>": counters and generators).
  void checkpoint(io::Checkpoint& ckpt, const std::string& name = "dqn");
  io::State state() const override;
  /// Checks everything first; then resets the environment with a seed
  /// derived from (seed, step): environment state is not part of the
  /// contract, so a resumed run starts fresh episodes.
  void load_state(const io::State& state) override;

 private:
  void setup(QNetwork& q, QNetwork& target);  // what both constructors share, once the networks exist
  // update()'s arithmetic: the TD loss, backward, clip and Adam; {loss, mean Q(s, a)}.
  std::pair<Tensor, Tensor> gradient_step(const ReplayBatch& batch);
  void reset_env(uint64_t seed);
  DQNStats take_window();

  VectorEnv& env_;
  DQNOptions options_;
  int64_t num_steps_ = 0;
  int64_t step_ = 0, updates_ = 0;
  std::unique_ptr<QNetwork> own_q_, own_target_;  // the networks DQN(env, options) builds
  QNetwork* q_ = nullptr;                         // own_q_ or the caller's
  QNetwork* target_ = nullptr;
  std::unique_ptr<optim::Adam> optimizer_;
  std::unique_ptr<train::CompiledStep> compiled_;  // options.compile: update()'s gradient step
  ReplayBuffer buffer_;
  Generator explore_gen_, sample_gen_;
  Tensor obs_;                           // [E, O]
  std::vector<double> episode_return_;   // [E]
  std::vector<int64_t> episode_length_;  // [E]
  // The current stats window.
  double loss_sum_ = 0, q_sum_ = 0, return_sum_ = 0, length_sum_ = 0;
  int64_t window_updates_ = 0, window_episodes_ = 0;
};

}  // namespace kiln::rl
