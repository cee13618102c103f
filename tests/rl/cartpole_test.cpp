// rl::CartPole against tools/goldens/rl_envs.py (Gymnasium's CartPole-v1
// restated in Python floats): f64 states bit for bit, f32 observations
// exactly; its resets, automatic resets and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "tests/support/rl_testing.h"

namespace kiln::rl {
namespace {

using testing::golden;

constexpr double kThetaThreshold = 12 * 2 * std::numbers::pi / 360;

Tensor actions_of(const std::vector<int64_t>& a) { return tensor(a); }

/// Random actions {0, 1} for E copies.
Tensor random_actions(int64_t e, Generator& gen) { return randint(0, 2, {e}, gen); }

TEST(CartPole, SpecIsGymnasiums) {
  CartPole env(3);
  const EnvSpec& s = env.spec();
  EXPECT_EQ(s.name, "CartPole-v1");
  EXPECT_EQ(env.num_envs(), 3);
  EXPECT_EQ(s.observation.to_string(), "Box([4], f32)");
  EXPECT_EQ(s.action.to_string(), "Discrete(2)");
  EXPECT_EQ(s.max_episode_steps, 500);
  EXPECT_EQ(s.reward_threshold, 475);
  // Twice the termination thresholds, as f32 (Gymnasium's observation_space).
  EXPECT_EQ(s.observation.high,
            (std::vector<double>{4.8f, 3.4028234663852886e38, float(2 * kThetaThreshold), 3.4028234663852886e38}));
  EXPECT_EQ(s.observation.low[0], -double(4.8f));
}

// Every golden case is one copy of one batch: copy i starts at case i's state
// and replays its actions; copies whose case has ended step with action 0.
TEST(CartPole, MatchesGymnasiumBitForBit) {
  const nlohmann::json& cases = golden("rl_envs")["cartpole"];
  const int64_t e = int64_t(cases.size());
  CartPole env(e);
  env.reset(0);
  std::vector<double> start;
  size_t steps = 0;
  for (const auto& c : cases) {
    for (double v : c["start"]) start.push_back(v);
    steps = std::max(steps, c["actions"].size());
  }
  Tensor obs0 = env.set_state(tensor(start, {e, 4}));
  EXPECT_EQ(obs0.to_vector<float>(), to(tensor(start, {e, 4}), kF32).to_vector<float>());
  int checked_pow_cases = 0;
  for (size_t t = 0; t < steps; ++t) {
    std::vector<int64_t> a(size_t(e), 0);
    for (int64_t i = 0; i < e; ++i)
      if (t < cases[i]["actions"].size()) a[i] = cases[i]["actions"][t];
    Transition tr = env.step(actions_of(a));
    const std::vector<double> state = env.state().to_vector<double>();
    const std::vector<float> obs = tr.obs.to_vector<float>(), final_obs = tr.final_obs.to_vector<float>();
    const std::vector<float> reward = tr.reward.to_vector<float>();
    const std::vector<bool> term = tr.terminated.to_vector<bool>(), trunc = tr.truncated.to_vector<bool>();
    const std::vector<int64_t> elapsed = env.elapsed_steps().to_vector<int64_t>();
    for (int64_t i = 0; i < e; ++i) {
      const auto& c = cases[i];
      const size_t n = c["actions"].size();
      if (t >= n) continue;
      const std::string where = fmt::format("case {} step {}", c["name"].get<std::string>(), t);
      const bool last = t + 1 == n;
      const bool done = last && (c["terminated"].get<bool>() || c["truncated"].get<bool>());
      EXPECT_EQ(term[i], last && c["terminated"].get<bool>()) << where;
      EXPECT_EQ(trunc[i], last && c["truncated"].get<bool>()) << where;
      EXPECT_EQ(reward[i], 1.0f) << where;
      for (int k = 0; k < 4; ++k) {
        const double ref = c["states"][t][k];
        EXPECT_EQ(final_obs[4 * i + k], float(ref)) << where << " final_obs[" << k << "]";
        if (done) continue;  // state() and obs already hold the next episode
        EXPECT_EQ(state[4 * i + k], ref) << where << " state[" << k << "]";
        EXPECT_EQ(obs[4 * i + k], float(ref)) << where << " obs[" << k << "]";
      }
      EXPECT_EQ(elapsed[i], done ? 0 : int64_t(t + 1)) << where;
      if (done) {
        for (int k = 0; k < 4; ++k) EXPECT_LT(std::abs(obs[4 * i + k]), 0.05f) << where << " new episode";
      }
    }
  }
  for (const auto& c : cases) checked_pow_cases += c["pow_matters"].get<int>() > 0;
  EXPECT_GT(checked_pow_cases, 0);  // a step that pow(v, 2) folded into v * v would change
}

TEST(CartPole, ResetDrawsUniformFromEachCopysStream) {
  CartPole env(5);
  Tensor obs = env.reset(3);
  const std::vector<double> s = env.state().to_vector<double>();
  ASSERT_EQ(s.size(), 20u);
  EXPECT_EQ(obs.to_vector<float>(), to(env.state(), kF32).to_vector<float>());
  for (int64_t i = 0; i < 5; ++i) {
    // Copy i's state is what uniform_ draws from env_generator(3, i) (up to
    // the rounding of lo + span * u, which may fuse there).
    Generator g = env_generator(3, i);
    const std::vector<double> ref = uniform_(Tensor::empty({4}, kF64), -0.05, 0.05, g).to_vector<double>();
    for (int k = 0; k < 4; ++k) {
      EXPECT_GE(s[4 * i + k], -0.05);
      EXPECT_LT(s[4 * i + k], 0.05);
      EXPECT_NEAR(s[4 * i + k], ref[k], 1e-17) << "copy " << i << " k " << k;
    }
  }
  EXPECT_EQ(env.elapsed_steps().to_vector<int64_t>(), std::vector<int64_t>(5, 0));
  // Same seed, same states; another seed, other states; copies differ.
  CartPole again(5);
  again.reset(3);
  EXPECT_TRUE(testing::equal(again.state(), env.state()));
  again.reset(4);
  EXPECT_NE(again.state().to_vector<double>(), s);
  EXPECT_NE(std::vector<double>(s.begin(), s.begin() + 4), std::vector<double>(s.begin() + 4, s.begin() + 8));
}

TEST(CartPole, ResetStatesAreUniform) {
  // 4 * 4096 draws of U(-0.05, 0.05): mean 0 and variance 0.1^2 / 12 within
  // 5 standard errors, and every tenth of the interval visited ~10%.
  CartPole env(4096);
  env.reset(11);
  const std::vector<double> s = env.state().to_vector<double>();
  double sum = 0, sq = 0;
  std::vector<int> bins(10, 0);
  for (double v : s) {
    sum += v, sq += v * v;
    bins[std::min(9, int((v + 0.05) / 0.01))]++;
  }
  const double n = double(s.size()), mean = sum / n, var = sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 5 * std::sqrt(0.01 / 12 / n));
  EXPECT_NEAR(var, 0.01 / 12, 5 * 0.01 / 12 * std::sqrt(0.8 / n));
  for (int b : bins) EXPECT_NEAR(b, n / 10, 5 * std::sqrt(n / 10));
}

// Copy i's episodes depend only on (seed, i) and its own actions: the first
// copies of a large batch (stepped in parallel chunks) replay a small one's.
// E = 2048 makes every output an exact allocator size class, so that under
// ASan a write past an output's end is caught.
TEST(CartPole, EpisodesDoNotDependOnNumEnvs) {
  CartPole small(3), large(2048);
  small.reset(5);
  large.reset(5);
  Generator gen(9);
  int64_t resets = 0;
  for (int t = 0; t < 60; ++t) {
    Tensor a = random_actions(2048, gen);
    Transition ts = small.step(narrow(a, 0, 0, 3));
    Transition tl = large.step(a);
    EXPECT_TRUE(testing::equal(ts.obs, narrow(tl.obs, 0, 0, 3))) << t;
    EXPECT_TRUE(testing::equal(ts.final_obs, narrow(tl.final_obs, 0, 0, 3))) << t;
    EXPECT_TRUE(testing::equal(ts.terminated, narrow(tl.terminated, 0, 0, 3))) << t;
    EXPECT_TRUE(testing::equal(ts.truncated, narrow(tl.truncated, 0, 0, 3))) << t;
    resets += sum(to(ts.done(), kI64)).item<int64_t>();
  }
  EXPECT_GT(resets, 3);  // random actions end an episode every ~20 steps
  EXPECT_TRUE(testing::equal(small.state(), narrow(large.state(), 0, 0, 3)));
}

TEST(CartPole, AutoResetStartsTheNextEpisodeInTheSameStep) {
  CartPole env(2);
  env.reset(1);
  const std::vector<int64_t> ones = {1, 1};
  Transition t;
  int steps = 0;
  do {
    t = env.step(actions_of(ones));
    ++steps;
  } while (!t.done().to_vector<bool>()[0] && steps < 50);
  ASSERT_LT(steps, 50);
  EXPECT_TRUE(t.terminated.to_vector<bool>()[0]);
  EXPECT_FALSE(t.truncated.to_vector<bool>()[0]);
  EXPECT_EQ(t.reward.to_vector<float>()[0], 1.0f);  // the terminal step earns its reward
  const std::vector<float> fin = t.final_obs.to_vector<float>(), obs = t.obs.to_vector<float>();
  EXPECT_LT(fin[2], -float(kThetaThreshold));  // pushed right: the pole fell left
  // obs is the next episode's first observation: the copy's stream after
  // its first reset's draw (2 Philox blocks).
  Generator g = env_generator(1, 0);
  g.advance(2);
  const std::vector<double> ref = uniform_(Tensor::empty({4}, kF64), -0.05, 0.05, g).to_vector<double>();
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(obs[k], ref[k], 1e-9) << k;
  EXPECT_EQ(env.elapsed_steps().to_vector<int64_t>()[0], 0);
  // Where not done, final_obs is obs.
  if (!t.done().to_vector<bool>()[1]) {
    EXPECT_TRUE(testing::equal(narrow(t.final_obs, 0, 1, 1), narrow(t.obs, 0, 1, 1)));
  }
}

TEST(CartPole, StridedActionsAreRead) {
  CartPole a(4), b(4);
  a.reset(2);
  b.reset(2);
  Tensor both = tensor(std::vector<int64_t>{0, 1, 1, 0, 1, 1, 0, 0}, {4, 2});
  Transition ta = a.step(select(both, 1, 0));  // stride 2
  Transition tb = b.step(actions_of({0, 1, 1, 0}));
  EXPECT_TRUE(testing::equal(ta.obs, tb.obs));
}

TEST(CartPole, BadCallsAreErrorsAndChangeNothing) {
  EXPECT_KILN_ERROR(CartPole(0), "[CartPole] num_envs must be positive, got 0");
  CartPole env(4);
  EXPECT_KILN_ERROR(env.step(actions_of({0, 1, 0, 1})),
                    "[CartPole.step] CartPole-v1 was stepped before reset(): call reset(seed) first");
  EXPECT_KILN_ERROR(env.set_state(zeros({4, 4}, {.dtype = kF64})), "[CartPole.set_state] called before reset()");
  env.reset(0);
  env.step(actions_of({0, 1, 0, 1}));
  const Tensor state = env.state(), elapsed = env.elapsed_steps();
  EXPECT_KILN_ERROR(env.step(zeros({4, 1}, {.dtype = kI64})),
                    "[CartPole.step] actions [4, 1] i64 do not match CartPole-v1's action space Discrete(2) for 4 "
                    "copies: expected [4] i64");
  EXPECT_KILN_ERROR(env.step(zeros({4})), "actions [4] f32 do not match");
  EXPECT_KILN_ERROR(env.step(zeros({3}, {.dtype = kI64})), "actions [3] i64 do not match");
  EXPECT_KILN_ERROR(env.step(Tensor()), "[CartPole.step] actions is an undefined tensor; expected [4] i64");
  EXPECT_KILN_ERROR(env.step(actions_of({0, 1, 2, 1})),
                    "[CartPole.step] actions[2] = 2 is outside CartPole-v1's action space Discrete(2) (0 or 1)");
  EXPECT_KILN_ERROR(env.step(actions_of({-1, 1, 0, 1})), "actions[0] = -1 is outside");
  EXPECT_KILN_ERROR(
      env.set_state(zeros({4, 3}, {.dtype = kF64})),
      "[CartPole.set_state] state must be [4, 4] f64 (x, x_dot, theta, theta_dot per copy), got [4, 3] f64");
  EXPECT_KILN_ERROR(env.set_state(zeros({4, 4})), "got [4, 4] f32");
  EXPECT_TRUE(testing::equal(env.state(), state));
  EXPECT_TRUE(testing::equal(env.elapsed_steps(), elapsed));
}

TEST(CartPole, OutputsAreNewTensors) {
  CartPole env(2);
  Tensor obs = env.reset(0);
  const Tensor before = env.state();
  fill_(obs, 7.0);
  Transition t = env.step(actions_of({0, 0}));
  fill_(t.obs, 7.0);
  fill_(t.final_obs, 7.0);
  EXPECT_LT(std::abs(env.state().to_vector<double>()[0]), 0.1);
  EXPECT_FALSE(testing::equal(env.state(), before));  // it stepped, from the real state
}

}  // namespace
}  // namespace kiln::rl
