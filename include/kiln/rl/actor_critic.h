// The ActorCritic contract (SPECS R2, spec 002): an environment-neutral
// policy-and-value network. PPO's collection, losses and updates, and
// evaluation, depend only on evaluate(); any module implementing it plugs in.
// MlpActorCritic is the default: CleanRL's classic-control agent. Letters: B
// rows, O observation shape, n actions (Discrete), A action dims (Box).
//
//   Rngs rngs(seed);
//   rl::MlpActorCritic agent(env.spec(), rngs);          // tanh 64-64 actor and critic
//   rl::PolicyOutput out = agent.evaluate(obs);         // obs [B, *O]
//   rl::ActionDistribution pi(env.spec().action, out.params, out.log_std);
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/nn/activation.h"
#include "kiln/nn/containers.h"
#include "kiln/nn/init.h"
#include "kiln/nn/linear.h"
#include "kiln/nn/module.h"
#include "kiln/rl/env.h"
#include "kiln/rl/normalization.h"

namespace kiln::rl {

/// What an actor-critic returns for observations [B, *O].
struct PolicyOutput {
  Tensor params;   // Discrete: logits [B, n]. Box: the Gaussian's mean [B, A], before tanh
  Tensor log_std;  // Box: [B, A], or [A] shared by every row; undefined for Discrete
  Tensor value;    // [B]: the critic's estimate of the state's return
};

/// The contract. evaluate is all PPO needs; value and observe have defaults.
class ActorCritic : public nn::Module {
 public:
  /// Distribution parameters and values for observations [B, *O] f32. const,
  /// as every module's forward: running statistics change only in observe().
  virtual PolicyOutput evaluate(const Tensor& obs) const = 0;
  /// The critic alone, [B] (PPO bootstraps truncated episodes with it). By
  /// default evaluate(obs).value.
  virtual Tensor value(const Tensor& obs) const { return evaluate(obs).value; }
  /// PPO calls this with every batch of observations it collects, before
  /// evaluating them: the place to update running statistics. Default: nothing.
  virtual void observe(const Tensor& obs) {}
};

struct MlpActorCriticOptions {
  std::vector<int64_t> hidden = {64, 64};  // tanh layers of the trunks
  // One trunk feeding both heads (CleanRL's Atari agent) instead of separate
  // actor and critic trunks (its classic-control agent).
  bool shared_trunk = false;
  // CleanRL's layer_init: orthogonal weights with gain sqrt(2) in the trunks,
  // 0.01 in the policy head and 1 in the value head, zero biases. false: the
  // Init's own initializers everywhere.
  bool orthogonal_init = true;
  double init_log_std = 0.0;   // Box: the state-independent log_std parameter's start
  bool normalize_obs = false;  // a RunningMeanStd ("obs_norm") in front, updated by observe()
};

/// An MLP actor-critic for a Discrete or a Box([A]) action space, observations
/// Box([O]). State-dict keys are those of CleanRL's Agent in PyTorch (with the
/// default two hidden layers):
///   separate trunks, Discrete:  critic.{0,2,4}.*, actor.{0,2,4}.*
///   separate trunks, Box:       actor_logstd [A], critic.{0,2,4}.*, actor_mean.{0,2,4}.*
///   shared trunk:               trunk.{0,2}.*, actor.0.* (or actor_mean.0.*), critic.0.*
/// with obs_norm.{mean,var,count} first when normalize_obs.
class MlpActorCritic : public ActorCritic {
 public:
  MlpActorCritic(const EnvSpec& spec, const nn::Init& init, const MlpActorCriticOptions& options = {});

  PolicyOutput evaluate(const Tensor& obs) const override;
  Tensor value(const Tensor& obs) const override;
  void observe(const Tensor& obs) override;

  const MlpActorCriticOptions& options() const { return options_; }

 private:
  Tensor features(const Tensor& obs) const;  // normalised observations [B, O]

  MlpActorCriticOptions options_;
  nn::Shared<RunningMeanStd> obs_norm_;                   // when normalize_obs
  nn::Shared<nn::Sequential> trunk_;                      // shared_trunk only
  nn::Shared<nn::Sequential> actor_, critic_;             // the heads' full paths, or the heads alone when shared
  nn::Parameter log_std_;                                 // Box only: [A]
};

}  // namespace kiln::rl
