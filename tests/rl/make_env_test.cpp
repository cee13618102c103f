// rl::make_vector_env: names, short names, and the error for unknown ones.
#include <gtest/gtest.h>

#include "tests/support/rl_testing.h"

namespace kiln::rl {
namespace {

TEST(MakeVectorEnv, BuildsEachEnvironmentByIdAndShortName) {
  for (const char* name : {"CartPole-v1", "cartpole"}) {
    auto env = make_vector_env(name, 3);
    EXPECT_EQ(env->spec().name, "CartPole-v1");
    EXPECT_EQ(env->num_envs(), 3);
    EXPECT_NE(dynamic_cast<CartPole*>(env.get()), nullptr);
    EXPECT_EQ(env->reset(0).shape(), (Shape{3, 4}));
  }
  for (const char* name : {"Pendulum-v1", "pendulum"}) {
    auto env = make_vector_env(name, 2);
    EXPECT_EQ(env->spec().name, "Pendulum-v1");
    EXPECT_NE(dynamic_cast<Pendulum*>(env.get()), nullptr);
    EXPECT_EQ(env->reset(0).shape(), (Shape{2, 3}));
  }
  EXPECT_EQ(vector_env_names(), (std::vector<std::string>{"CartPole-v1", "Pendulum-v1"}));
  // The same episodes as the class built directly.
  auto env = make_vector_env("cartpole", 2);
  CartPole direct(2);
  EXPECT_TRUE(testing::equal(env->reset(7), direct.reset(7)));
}

TEST(MakeVectorEnv, UnknownNamesAndBadCountsAreErrors) {
  EXPECT_KILN_ERROR(make_vector_env("CartPole-v0", 1),
                    "[make_vector_env] unknown environment 'CartPole-v0'; known: CartPole-v1 (cartpole), "
                    "Pendulum-v1 (pendulum)");
  EXPECT_KILN_ERROR(make_vector_env("cartpole", 0), "[CartPole] num_envs must be positive, got 0");
}

}  // namespace
}  // namespace kiln::rl
