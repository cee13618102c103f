// Running normalisation for on-policy RL (gym's NormalizeObservation and
// NormalizeReward, as CleanRL's continuous PPO uses them): running moments
// merged batch by batch with Chan et al.'s parallel formula, computed in f64.
// Letters: B rows, O observation shape.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/io/checkpoint.h"
#include "kiln/nn/module.h"

namespace kiln::rl {

/// Running mean and (population) variance of a stream of batches, in f64.
/// Starts as gym's RunningMeanStd: mean 0, var 1, count 1e-4.
struct RunningMoments {
  std::vector<double> mean, var;
  double count = 1e-4;

  explicit RunningMoments(int64_t size = 1) : mean(size_t(size), 0.0), var(size_t(size), 1.0) {}
  /// Merges a batch of rows whose per-column mean and variance are given.
  void merge(const std::vector<double>& batch_mean, const std::vector<double>& batch_var, double batch_count);
  /// Merges the rows of x [B, size] (any float dtype).
  void update(const Tensor& x);
};

/// A module that normalises observations by their running statistics:
/// forward(obs) = clamp((obs - mean) / sqrt(var + eps), -clip, clip), with
/// mean, var [*O] and count as buffers (so they ride in state dicts and
/// checkpoints). update(obs) merges a batch [B, *O]; forward never updates,
/// so evaluation sees the statistics training left.
class RunningMeanStd : public nn::Module {
 public:
  explicit RunningMeanStd(const Shape& shape, double clip = 10.0, double eps = 1e-8);

  Tensor forward(const Tensor& obs) const;
  void update(const Tensor& obs);
  std::string extra_repr() const override;

  Tensor mean, var, count;  // buffers: [*O] f32, [*O] f32, [] f64

 private:
  Shape shape_;
  double clip_, eps_;
};

/// Rewards divided by the running standard deviation of each environment's
/// discounted return, then clipped to [-clip, clip] (gym 0.26's
/// NormalizeReward with CleanRL's clip): return_e = gamma * return_e +
/// reward_e, the E returns of each step merge into the statistics, and an
/// environment's return restarts at 0 after its episode ends. Its state rides
/// in checkpoints.
class RewardScaler : public io::Stateful {
 public:
  RewardScaler(int64_t num_envs, double gamma, double clip = 10.0, double eps = 1e-8);

  /// rewards [E] f32 (raw), done [E] bool of the same step -> scaled rewards [E] f32.
  Tensor operator()(const Tensor& rewards, const Tensor& done);
  /// Restarts every environment's discounted return at 0 (after a reset).
  void reset_returns();
  /// The running variance of the discounted return.
  double var() const { return moments_.var[0]; }

  io::State state() const override;
  void load_state(const io::State& state) override;

 private:
  std::vector<double> returns_;  // [E]
  RunningMoments moments_;
  double gamma_, clip_, eps_;
};

}  // namespace kiln::rl
