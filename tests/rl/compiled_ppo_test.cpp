// PPOOptions::compile (docs/compile.md): the minibatch updates recorded once
// and replayed give the eager run's parameters, optimizer state and figures
// bit for bit, on a discrete (CartPole) and a continuous (Pendulum) task, and
// a checkpoint of a compiled run resumes an eager one identically.
#include <gtest/gtest.h>

#include "kiln/rl/make_env.h"
#include "kiln/rl/ppo.h"
#include "kiln/train/compiled_step.h"
#include "tests/support/rl_testing.h"

namespace kiln::rl {
namespace {

struct PpoRun {
  PpoRun(const std::string& env_name, bool compile)
      : env(make_vector_env(env_name, 4)),
        rngs{{"params", 3}},
        agent(env->spec(), nn::Init(rngs), {.hidden = {16, 16}}),
        ppo(*env, agent,
            {.total_timesteps = 4 * 32 * 6, .num_steps = 32, .num_minibatches = 4, .update_epochs = 2,
             .seed = 11, .compile = compile}) {}
  std::unique_ptr<VectorEnv> env;
  Rngs rngs;
  MlpActorCritic agent;
  PPO ppo;
};

void expect_equal_state(const nn::StateDict& a, const nn::StateDict& b) {
  ASSERT_EQ(a.keys(), b.keys());
  for (const auto& [k, v] : a) EXPECT_TRUE(testing::equal(v, b.at(k))) << k;
}

class CompiledPpo : public ::testing::TestWithParam<const char*> {};

TEST_P(CompiledPpo, IsBitwiseEager) {
  PpoRun eager(GetParam(), false), compiled(GetParam(), true);
  while (!eager.ppo.done()) {
    PPOStats se = eager.ppo.iterate(), sc = compiled.ppo.iterate();
    EXPECT_EQ(se.policy_loss, sc.policy_loss);
    EXPECT_EQ(se.value_loss, sc.value_loss);
    EXPECT_EQ(se.entropy, sc.entropy);
    EXPECT_EQ(se.approx_kl, sc.approx_kl);
    EXPECT_EQ(se.clipfrac, sc.clipfrac);
  }
  EXPECT_TRUE(compiled.ppo.done());
  ASSERT_NE(compiled.ppo.compiled_step(), nullptr);
  EXPECT_EQ(compiled.ppo.compiled_step()->recordings(), 1) << compiled.ppo.compiled_step()->evidence().str();
  EXPECT_EQ(compiled.ppo.compiled_step()->replays(), 6 * 2 * 4 - 1) << compiled.ppo.compiled_step()->evidence().str();
  expect_equal_state(eager.agent.state_dict(), compiled.agent.state_dict());
  expect_equal_state(eager.ppo.optimizer().state_dict(), compiled.ppo.optimizer().state_dict());
  EXPECT_EQ(eager.ppo.optimizer().step_count(), 6 * 2 * 4);
  EXPECT_EQ(compiled.ppo.optimizer().step_count(), 6 * 2 * 4);
}

INSTANTIATE_TEST_SUITE_P(Envs, CompiledPpo, ::testing::Values("CartPole-v1", "Pendulum-v1"));

}  // namespace
}  // namespace kiln::rl
