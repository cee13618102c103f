// DQNOptions::compile and SACOptions::compile (docs/compile.md): the gradient
// steps recorded once and replayed give the eager run's figures, networks
// (targets included: their soft updates write the recorded parameters in
// place), Adam state and generators bit for bit, over hundreds of updates.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <tuple>

#include "kiln/rl/dqn.h"
#include "kiln/rl/make_env.h"
#include "kiln/rl/sac.h"
#include "kiln/train/compiled_step.h"
#include "tests/support/rl_testing.h"

namespace kiln::rl {
namespace {

void expect_equal_state(const nn::StateDict& a, const nn::StateDict& b) {
  ASSERT_EQ(a.keys(), b.keys());
  for (const auto& [k, v] : a) EXPECT_TRUE(testing::equal(v, b.at(k))) << k;
}

// Recordings: one per signature; the first calls differ from the later ones
// only in which parameters already hold a gradient (DQN: the first; SAC's
// critic step: the first, and the second, before the first actor step).
void expect_replayed(const train::CompiledStep* c, int64_t calls, int64_t max_recordings = 2) {
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->eager_calls(), 0) << c->evidence().str();
  EXPECT_LE(c->recordings(), max_recordings) << c->evidence().str();
  EXPECT_EQ(c->recordings() + c->replays(), calls) << c->evidence().str();
  EXPECT_TRUE(c->evidence().replayable) << c->evidence().str();
}

struct DqnCase {
  const char* name;
  DQNOptions options;
};

class CompiledDqn : public ::testing::TestWithParam<DqnCase> {};

TEST_P(CompiledDqn, IsBitwiseEager) {
  auto run = [](bool compile) {
    DQNOptions o = GetParam().options;
    o.compile = compile;
    auto env = make_vector_env("CartPole-v1", 1);
    auto dqn = std::make_unique<DQN>(*env, o);
    std::vector<DQNStats> stats;
    dqn->learn([&](const DQNStats& s) { stats.push_back(s); return true; }, 50);
    return std::make_tuple(std::move(env), std::move(dqn), stats);
  };
  auto [env_e, eager, se] = run(false);
  auto [env_c, compiled, sc] = run(true);
  ASSERT_EQ(se.size(), sc.size());
  for (size_t i = 0; i < se.size(); ++i) {
    if (std::isnan(se[i].td_loss)) {
      EXPECT_TRUE(std::isnan(sc[i].td_loss)) << i;
      continue;
    }
    EXPECT_EQ(se[i].td_loss, sc[i].td_loss) << i;
    EXPECT_EQ(se[i].q_value, sc[i].q_value) << i;
    EXPECT_EQ(se[i].episodes, sc[i].episodes) << i;
  }
  EXPECT_GE(compiled->updates(), 100);
  EXPECT_EQ(eager->updates(), compiled->updates());
  expect_replayed(compiled->compiled_step(), compiled->updates());
  EXPECT_EQ(eager->compiled_step(), nullptr);
  expect_equal_state(eager->q_network().state_dict(), compiled->q_network().state_dict());
  expect_equal_state(eager->target_network().state_dict(), compiled->target_network().state_dict());
  expect_equal_state(eager->optimizer().state_dict(), compiled->optimizer().state_dict());
  EXPECT_EQ(eager->optimizer().step_count(), compiled->optimizer().step_count());
  // The run's counters and generators, as a checkpoint holds them.
  EXPECT_EQ(eager->state(), compiled->state());
}

INSTANTIATE_TEST_SUITE_P(
    Variants, CompiledDqn,
    ::testing::Values(
        // CleanRL's loss, a hard target copy every 40 steps: 400 updates.
        DqnCase{"mse", {.total_timesteps = 500, .buffer_size = 500, .target_network_frequency = 40, .batch_size = 32,
                        .learning_starts = 100, .train_frequency = 1, .hidden = {32, 16}, .seed = 3}},
        // Huber, double DQN, gradient clipping and soft target updates.
        DqnCase{"double_huber_clip",
                {.total_timesteps = 360, .buffer_size = 400, .tau = 0.1, .target_network_frequency = 3,
                 .batch_size = 16, .learning_starts = 50, .train_frequency = 2, .huber = true, .double_q = true,
                 .max_grad_norm = 0.5, .hidden = {24}, .seed = 5}}),
    [](const ::testing::TestParamInfo<DqnCase>& i) { return std::string(i.param.name); });

TEST(CompiledSac, IsBitwiseEager) {
  auto run = [](bool compile) {
    auto env = make_vector_env("Pendulum-v1", 1);
    auto sac = std::make_unique<SAC>(*env, SACOptions{.total_timesteps = 260, .buffer_size = 300, .batch_size = 32,
                                                      .learning_starts = 60, .hidden = 32, .seed = 7,
                                                      .compile = compile});
    std::vector<SACStats> stats;
    sac->learn([&](const SACStats& s) { stats.push_back(s); return true; }, 40);
    return std::make_tuple(std::move(env), std::move(sac), stats);
  };
  auto [env_e, eager, se] = run(false);
  auto [env_c, compiled, sc] = run(true);
  ASSERT_EQ(se.size(), sc.size());
  for (size_t i = 0; i < se.size(); ++i) {
    if (std::isnan(se[i].qf_loss)) continue;
    EXPECT_EQ(se[i].qf_loss, sc[i].qf_loss) << i;
    EXPECT_EQ(se[i].qf1_value, sc[i].qf1_value) << i;
    EXPECT_EQ(se[i].actor_loss, sc[i].actor_loss) << i;
    EXPECT_EQ(se[i].entropy, sc[i].entropy) << i;
  }
  // 200 critic updates, 200 actor updates (two every second step).
  EXPECT_EQ(compiled->state(), eager->state());
  expect_replayed(compiled->compiled_critic_step(), 200, 3);
  expect_replayed(compiled->compiled_actor_step(), 200);
  expect_equal_state(eager->actor().state_dict(), compiled->actor().state_dict());
  expect_equal_state(eager->critics().state_dict(), compiled->critics().state_dict());
  expect_equal_state(eager->target_critics().state_dict(), compiled->target_critics().state_dict());
  expect_equal_state(eager->actor_optimizer().state_dict(), compiled->actor_optimizer().state_dict());
  expect_equal_state(eager->q_optimizer().state_dict(), compiled->q_optimizer().state_dict());
}

TEST(CompiledSac, GivenNoiseIsAnInputOfTheReplay) {
  // update_critics / update_actor with explicit noise: the noise is a replay
  // input (a new value each call), not a constant of the recording.
  auto make = [](bool compile) {
    auto env = make_vector_env("Pendulum-v1", 1);
    auto sac = std::make_unique<SAC>(*env, SACOptions{.total_timesteps = 100, .buffer_size = 100, .batch_size = 8,
                                                      .learning_starts = 100, .hidden = 16, .seed = 2,
                                                      .compile = compile});
    while (!sac->done()) sac->step();
    return std::make_pair(std::move(env), std::move(sac));
  };
  auto [env_e, eager] = make(false);
  auto [env_c, compiled] = make(true);
  Generator g(9);
  for (int i = 0; i < 6; ++i) {
    ReplayBatch be = eager->replay_buffer().sample(8, g);
    Tensor noise = randn({8, 1}, g), noise2 = randn({8, 1}, g);
    SACCriticUpdate ce = eager->update_critics(be, noise), cc = compiled->update_critics(be, noise);
    EXPECT_EQ(ce.qf1_loss, cc.qf1_loss) << i;
    EXPECT_EQ(ce.qf2_value, cc.qf2_value) << i;
    SACActorUpdate ae = eager->update_actor(be, noise2), ac = compiled->update_actor(be, noise2);
    EXPECT_EQ(ae.actor_loss, ac.actor_loss) << i;
    EXPECT_EQ(ae.log_pi, ac.log_pi) << i;
  }
  expect_replayed(compiled->compiled_critic_step(), 6, 3);
  expect_replayed(compiled->compiled_actor_step(), 6);
  expect_equal_state(eager->actor().state_dict(), compiled->actor().state_dict());
  expect_equal_state(eager->critics().state_dict(), compiled->critics().state_dict());
}

}  // namespace
}  // namespace kiln::rl
