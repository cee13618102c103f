// Action distributions of kiln::rl (SPECS R4, R5, R9): a categorical over
// logits and a diagonal Gaussian squashed by tanh into a box. Both are built
// from kiln ops, so log_prob and entropy are differentiable in the parameters;
// sampling draws from a caller's Generator. Letters: B rows (batch or
// environments), n categories, A action dims.
//
//   rl::Categorical pi(logits);                   // logits [B, n]
//   Tensor a = pi.sample(gen);                    // [B] i64
//   Tensor logp = pi.log_prob(a);                 // [B]
//
//   rl::TanhGaussian pi(mean, log_std, env.spec().action);  // mean [B, A], log_std [B, A] or [A]
//   auto [action, raw] = pi.sample(gen);          // action in [low, high] for the env; raw before tanh
//   Tensor logp = pi.log_prob(raw);               // [B]: re-evaluate from the raw action (stable)
#pragma once

#include <optional>
#include <vector>

#include "kiln/core/generator.h"
#include "kiln/core/tensor.h"
#include "kiln/rl/env.h"

namespace kiln::rl {

/// torch.distributions.Categorical(logits=...): one categorical per row.
class Categorical {
 public:
  /// logits [B, n], floating, any finite or -inf values (-inf: an impossible
  /// category); they are normalised as torch does: logits - logsumexp(logits).
  explicit Categorical(const Tensor& logits);

  /// The normalised logits (log-probabilities) [B, n].
  const Tensor& logits() const { return logits_; }
  /// softmax [B, n].
  Tensor probs() const;
  int64_t num_categories() const { return logits_.size(1); }

  /// One category per row, [B] i64, by inverse CDF from one uniform of `gen`
  /// per row (not differentiable). Rows whose logits are not finite or all
  /// -inf are an error.
  Tensor sample(Generator& gen) const;
  /// log p(actions), [B]; actions [B] integer in [0, n).
  Tensor log_prob(const Tensor& actions) const;
  /// -sum_k p_k log p_k, [B] (impossible categories contribute 0).
  Tensor entropy() const;
  /// The most likely category, [B] i64 (the first on ties): the deterministic action.
  Tensor mode() const;

 private:
  Tensor logits_;
};

/// A diagonal Gaussian N(mean, exp(log_std)^2) over raw actions u, squashed
/// into the box [low, high] by action = low + (high - low) (tanh(u) + 1) / 2.
/// The raw action is the numerically stable carrier (spec 002): log_prob takes
/// u, so re-evaluating a stored action never needs atanh of a value rounded
/// to the bound. log_prob(u) = sum_A [log N(u; mean, std) - log|d action/du|]
/// with log|d action/du| = log((high - low) / 2) + 2 (log 2 - u - softplus(-2u)),
/// the form of torch's TanhTransform that stays finite for any u.
class TanhGaussian {
 public:
  /// mean [B, A]; log_std [B, A] or [A] (shared by every row); low/high A
  /// finite bounds with low < high.
  TanhGaussian(const Tensor& mean, const Tensor& log_std, const std::vector<double>& low,
               const std::vector<double>& high);
  /// The bounds of a Box space of shape [A].
  TanhGaussian(const Tensor& mean, const Tensor& log_std, const Space& box);

  struct Sample {
    Tensor action;  // [B, A] in [low, high]: what the environment gets
    Tensor raw;     // [B, A] before tanh: what log_prob takes
  };
  /// raw = mean + std * eps, eps ~ N(0, 1) from `gen`; no graph.
  Sample sample(Generator& gen) const;
  /// The same draw, reparameterised: raw and action are differentiable in
  /// mean and log_std (SAC's actor loss).
  Sample rsample(Generator& gen) const;
  /// log density of the squashed action at raw action `raw` [B, A], [B].
  Tensor log_prob(const Tensor& raw) const;
  /// The action of a raw action: low + (high - low) (tanh(raw) + 1) / 2, [B, A].
  Tensor squash(const Tensor& raw) const;
  /// squash(mean): the deterministic action.
  Tensor mode() const;
  /// The entropy of the Gaussian before squashing, sum_A (log_std + log(2 pi e) / 2),
  /// [B] (the squashed distribution's has no closed form; PPO's bonus uses this).
  Tensor entropy() const;

  const Tensor& mean() const { return mean_; }
  const Tensor& log_std() const { return log_std_; }
  int64_t action_dim() const { return mean_.size(1); }

 private:
  Sample draw(Generator& gen, bool reparameterised) const;

  Tensor mean_, log_std_;
  Tensor center_, half_range_;  // [A]: (high + low) / 2 and (high - low) / 2, mean's dtype
  double sum_log_half_range_ = 0;
};

/// A policy's action distribution for an environment's action space: a
/// Categorical for Discrete(n), a TanhGaussian for Box([A]). PPO and
/// evaluation are written against it, so one loop serves both kinds. The
/// carrier of an action is what log_prob takes: the action itself for
/// Discrete, the raw (pre-tanh) action for Box.
class ActionDistribution {
 public:
  /// Discrete(n): params = logits [B, n] (log_std undefined). Box([A]):
  /// params = mean [B, A], log_std [B, A] or [A].
  ActionDistribution(const Space& action_space, const Tensor& params, const Tensor& log_std = {});

  struct Sample {
    Tensor action;   // for the environment: [B] i64 (Discrete) or [B, A] f32 (Box)
    Tensor carrier;  // for log_prob: the action (Discrete) or the raw action [B, A] (Box)
  };
  /// A draw from `gen`, no graph. Box actions are clamped into the box (f32
  /// rounding of the squash can land an ulp outside).
  Sample sample(Generator& gen) const;
  /// log p of carriers [B].
  Tensor log_prob(const Tensor& carrier) const;
  Tensor entropy() const;  // [B]
  /// The deterministic action for the environment (argmax, or the squashed mean).
  Tensor mode() const;
  bool is_discrete() const { return categorical_.has_value(); }

 private:
  std::optional<Categorical> categorical_;
  std::optional<TanhGaussian> gaussian_;
  Space box_;  // Box: the bounds the environment's actions are clamped into
};

}  // namespace kiln::rl
