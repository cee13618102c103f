// Tests of rl::MlpActorCritic (CleanRL's Agent: state-dict names, layer_init
// gains, shapes, the shared-trunk variant, observation normalisation) and of
// the running statistics in kiln/rl/normalization.h (against the moments of
// the concatenated batches, and gym's NormalizeReward by hand).
#include <cmath>

#include "kiln/rl/actor_critic.h"
#include "tests/rl/toy_envs.h"
#include "tests/support/rl_testing.h"

namespace kiln::rl {
namespace {

using kiln::testing::all_close;

EnvSpec box_spec(int64_t obs, int64_t act) {
  return {.name = "Box",
          .observation = Space::box({obs}, std::vector<double>(size_t(obs), -1), std::vector<double>(size_t(obs), 1)),
          .action = Space::box({act}, std::vector<double>(size_t(act), -2), std::vector<double>(size_t(act), 2))};
}
EnvSpec discrete_spec(int64_t obs, int64_t n) {
  EnvSpec s = box_spec(obs, 1);
  s.action = Space::discrete(n);
  return s;
}

// ||W W^T - gain^2 I|| for the wide heads (rows <= cols).
double orthogonality_error(const Tensor& w, double gain) {
  Tensor g = w.size(0) <= w.size(1) ? matmul(w, w.t()) : matmul(w.t(), w);
  return max(abs(g - eye(g.size(0)) * (gain * gain))).item<double>();
}

TEST(RlMlpActorCritic, HasCleanRLsLayoutAndLayerInit) {
  Rngs rngs(0);
  MlpActorCritic d(discrete_spec(4, 2), rngs);
  EXPECT_EQ(kiln::testing::state_dict_keys(d),
            (std::vector<std::string>{"critic.0.weight", "critic.0.bias", "critic.2.weight", "critic.2.bias",
                                      "critic.4.weight", "critic.4.bias", "actor.0.weight", "actor.0.bias",
                                      "actor.2.weight", "actor.2.bias", "actor.4.weight", "actor.4.bias"}));
  EXPECT_EQ(d.num_parameters(), (4 * 64 + 64 + 64 * 64 + 64 + 64 + 1) + (4 * 64 + 64 + 64 * 64 + 64 + 64 * 2 + 2));
  auto sd = d.state_dict();
  const double sqrt2 = std::sqrt(2.0);
  EXPECT_LT(orthogonality_error(sd.at("critic.0.weight"), sqrt2), 1e-5);
  EXPECT_LT(orthogonality_error(sd.at("actor.2.weight"), sqrt2), 1e-5);
  EXPECT_LT(orthogonality_error(sd.at("actor.4.weight"), 0.01), 1e-7);  // policy head: std 0.01
  EXPECT_LT(orthogonality_error(sd.at("critic.4.weight"), 1.0), 1e-5);  // value head: std 1
  for (const char* b : {"critic.0.bias", "actor.2.bias", "actor.4.bias", "critic.4.bias"})
    EXPECT_EQ(sum(abs(sd.at(b))).item<float>(), 0.0f) << b;

  MlpActorCritic c(box_spec(3, 2), rngs, {.init_log_std = -0.5});
  // A module's own parameters come before its children's, as in PyTorch.
  EXPECT_EQ(kiln::testing::state_dict_keys(c),
            (std::vector<std::string>{"actor_logstd", "critic.0.weight", "critic.0.bias", "critic.2.weight",
                                      "critic.2.bias", "critic.4.weight", "critic.4.bias", "actor_mean.0.weight",
                                      "actor_mean.0.bias", "actor_mean.2.weight", "actor_mean.2.bias",
                                      "actor_mean.4.weight", "actor_mean.4.bias"}));
  EXPECT_EQ(c.state_dict().at("actor_logstd").to_vector<float>(), (std::vector<float>{-0.5f, -0.5f}));

  MlpActorCritic s(discrete_spec(4, 3), rngs, {.hidden = {32}, .shared_trunk = true, .normalize_obs = true});
  EXPECT_EQ(kiln::testing::state_dict_keys(s),
            (std::vector<std::string>{"obs_norm.mean", "obs_norm.var", "obs_norm.count", "trunk.0.weight",
                                      "trunk.0.bias", "actor.0.weight", "actor.0.bias", "critic.0.weight",
                                      "critic.0.bias"}));
  // Without orthogonal_init the Init's own initializers are used.
  Rngs r2(1);
  nn::Init init(r2);
  init.weight = nn::init::constant(0.25);
  MlpActorCritic plain(discrete_spec(4, 2), init, {.orthogonal_init = false});
  EXPECT_EQ(max(plain.state_dict().at("actor.4.weight")).item<float>(), 0.25f);
}

TEST(RlMlpActorCritic, EvaluateShapesAndTheCriticAlone) {
  Rngs rngs(0);
  Generator g(1);
  Tensor obs = randn({5, 4}, g);
  for (bool shared : {false, true}) {
    MlpActorCritic d(discrete_spec(4, 3), rngs, {.shared_trunk = shared});
    PolicyOutput out = d.evaluate(obs);
    EXPECT_EQ(out.params.shape(), (Shape{5, 3}));
    EXPECT_FALSE(out.log_std.defined());
    EXPECT_EQ(out.value.shape(), (Shape{5}));
    EXPECT_TRUE(all_close(d.value(obs), out.value));
    // The policy head's std 0.01 starts the policy near uniform.
    EXPECT_LT(max(abs(out.params)).item<float>(), 0.2f);
  }
  MlpActorCritic c(box_spec(4, 2), rngs);
  PolicyOutput out = c.evaluate(obs);
  EXPECT_EQ(out.params.shape(), (Shape{5, 2}));
  EXPECT_EQ(out.log_std.shape(), (Shape{2}));
  EXPECT_TRUE(out.log_std.requires_grad());
  // The value is the critic's own path: its gradient reaches only critic.*.
  sum(c.value(obs)).backward();
  for (const auto& [name, p] : c.named_parameters()) {
    bool critic = name.starts_with("critic.");
    EXPECT_EQ(p.grad().defined(), critic) << name;
  }
}

TEST(RlMlpActorCritic, ObservationNormalisationUsesTheRunningStatistics) {
  Rngs rngs(0);
  MlpActorCritic a(discrete_spec(2, 2), rngs, {.normalize_obs = true});
  Rngs rngs2(0);
  MlpActorCritic b(discrete_spec(2, 2), rngs2);  // the same weights, no normaliser
  Generator g(2);
  Tensor obs = randn({64, 2}, g) * 3.0 + 5.0;
  a.observe(obs);
  // After one batch the statistics are the batch's (count 1e-4 barely weighs).
  Tensor m = kiln::mean(obs, {0}), v = var(obs, {0}, /*unbiased=*/false);
  Tensor z = (obs - m) / sqrt(v + 1e-8);
  EXPECT_TRUE(all_close(a.evaluate(obs).params, b.evaluate(z).params, 1e-4, 1e-5));
  b.observe(obs);  // no normaliser: nothing happens
  EXPECT_TRUE(all_close(b.evaluate(z).params, b.evaluate(z).params));
}

TEST(RlMlpActorCritic, BadSpacesAndObservationsAreErrors) {
  Rngs rngs(0);
  EnvSpec s = discrete_spec(4, 2);
  s.action = Space::binary({2});
  EXPECT_KILN_ERROR(MlpActorCritic(s, rngs), "[MlpActorCritic] Box: actions must be Discrete(n) or Box([A]), got Binary([2])");
  s = discrete_spec(4, 2);
  s.observation = Space::box({2, 2}, {0, 0, 0, 0}, {1, 1, 1, 1});
  EXPECT_KILN_ERROR(MlpActorCritic(s, rngs), "observations must be Box([O]), got Box([2, 2], f32)");
  EXPECT_KILN_ERROR(MlpActorCritic(discrete_spec(4, 2), rngs, {.hidden = {64, 0}}), "hidden sizes must be positive, got 0");
  MlpActorCritic d(discrete_spec(4, 2), rngs);
  EXPECT_KILN_ERROR(d.evaluate(zeros({4})), "[MlpActorCritic] observations must be [B, O], got [4] f32");
}

TEST(RlRunningMoments, MergingBatchesGivesTheMomentsOfTheirConcatenation) {
  Generator g(4);
  Tensor a = randn({10, 3}, g, {.dtype = kF64}) * 2.0 + 1.0, b = randn({7, 3}, g, {.dtype = kF64}) - 3.0;
  RunningMoments m(3);
  m.update(a);
  m.update(b);
  Tensor all = cat({a, b});
  // gym's start (mean 0, var 1, count 1e-4) is one tiny pseudo-sample.
  Tensor want_mean = (sum(all, {0}) + 0.0) / (17 + 1e-4);
  std::vector<double> mean = want_mean.to_vector<double>();
  std::vector<double> var_all = var(all, {0}, false).to_vector<double>();
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(m.mean[i], mean[i], 1e-9);
    EXPECT_NEAR(m.var[i], var_all[i], 1e-3);  // the pseudo-sample moves it by ~1e-5 relative
  }
  EXPECT_NEAR(m.count, 17 + 1e-4, 1e-12);
}

TEST(RlRewardScaler, DividesByTheRunningStdOfTheDiscountedReturn) {
  RewardScaler s(2, 0.5);
  // Step 1: returns [1, 3]; moments of {1, 3} merged with (0, 1, 1e-4).
  Tensor r1 = s(tensor<float>({1, 3}), tensor(std::vector<bool>{false, true}));
  RunningMoments m(1);
  m.merge({2.0}, {1.0}, 2);
  std::vector<float> got = r1.to_vector<float>();
  EXPECT_NEAR(got[0], 1 / std::sqrt(m.var[0] + 1e-8), 1e-6);
  EXPECT_NEAR(got[1], 3 / std::sqrt(m.var[0] + 1e-8), 1e-6);
  // Step 2: env 0's return carries (0.5 * 1 + 2 = 2.5), env 1's restarted (0 + 2 = 2).
  Tensor r2 = s(tensor<float>({2, 2}), tensor(std::vector<bool>{false, false}));
  m.merge({2.25}, {0.0625}, 2);
  EXPECT_NEAR(r2.to_vector<float>()[0], 2 / std::sqrt(m.var[0] + 1e-8), 1e-6);
  EXPECT_NEAR(s.var(), m.var[0], 1e-12);
  // The state round-trips exactly and is checked.
  RewardScaler t(2, 0.5);
  t.load_state(s.state());
  EXPECT_EQ(t.state(), s.state());
  RewardScaler u(3, 0.5);
  EXPECT_KILN_ERROR(u.load_state(s.state()), "[RewardScaler] state is for 2 environments, this scaler has 3");
  // Clipping at 10: after 1000 returns of 1 the std is small, so 1000 would scale to ~30.
  RewardScaler c(1, 0.0);
  for (int i = 0; i < 1000; ++i) c(tensor<float>({1}), tensor(std::vector<bool>{true}));
  EXPECT_EQ(c(tensor<float>({1000}), tensor(std::vector<bool>{true})).item<float>(), 10.0f);
}

}  // namespace
}  // namespace kiln::rl
