// rl::Pendulum against tools/goldens/rl_envs.py (Gymnasium's Pendulum-v1
// restated in Python floats): f64 states bit for bit, f32 observations and
// rewards exactly; its resets, truncation, clipping and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "tests/support/rl_testing.h"

namespace kiln::rl {
namespace {

using testing::golden;

constexpr double kPi = std::numbers::pi;

/// [E, 1] f32 torques.
Tensor torques(const std::vector<float>& u) { return tensor(u, {int64_t(u.size()), 1}); }

TEST(Pendulum, SpecIsGymnasiums) {
  Pendulum env(2);
  const EnvSpec& s = env.spec();
  EXPECT_EQ(s.name, "Pendulum-v1");
  EXPECT_EQ(s.observation.to_string(), "Box([3], f32)");
  EXPECT_EQ(s.observation.high, (std::vector<double>{1, 1, 8}));
  EXPECT_EQ(s.action.to_string(), "Box([1], f32)");
  EXPECT_EQ(s.action.low, std::vector<double>{-2});
  EXPECT_EQ(s.action.high, std::vector<double>{2});
  EXPECT_EQ(s.max_episode_steps, 200);
  EXPECT_TRUE(std::isnan(s.reward_threshold));
}

// One copy per golden case; copies whose case has ended step with torque 0.
TEST(Pendulum, MatchesGymnasiumBitForBit) {
  const nlohmann::json& cases = golden("rl_envs")["pendulum"];
  const int64_t e = int64_t(cases.size());
  Pendulum env(e);
  env.reset(0);
  std::vector<double> start;
  size_t steps = 0;
  for (const auto& c : cases) {
    for (double v : c["start"]) start.push_back(v);
    steps = std::max(steps, c["actions"].size());
  }
  const std::vector<float> obs0 = env.set_state(tensor(start, {e, 2})).to_vector<float>();
  EXPECT_EQ(obs0[0], float(std::cos(start[0])));
  EXPECT_EQ(obs0[2], float(start[1]));
  int clipped_torque = 0, clipped_speed = 0, wrapped = 0;
  for (size_t t = 0; t < steps; ++t) {
    std::vector<float> u(size_t(e), 0.0f);
    for (int64_t i = 0; i < e; ++i)
      if (t < cases[i]["actions"].size()) u[i] = cases[i]["actions"][t];
    Transition tr = env.step(torques(u));
    const std::vector<double> state = env.state().to_vector<double>();
    const std::vector<float> obs = tr.obs.to_vector<float>(), final_obs = tr.final_obs.to_vector<float>();
    const std::vector<float> reward = tr.reward.to_vector<float>();
    const std::vector<bool> term = tr.terminated.to_vector<bool>(), trunc = tr.truncated.to_vector<bool>();
    for (int64_t i = 0; i < e; ++i) {
      const auto& c = cases[i];
      const size_t n = c["actions"].size();
      if (t >= n) continue;
      const std::string where = fmt::format("case {} step {}", c["name"].get<std::string>(), t);
      const bool done = t + 1 == n && c["truncated"].get<bool>();
      EXPECT_FALSE(term[i]) << where;
      EXPECT_EQ(trunc[i], done) << where;
      EXPECT_EQ(reward[i], c["reward"][t].get<float>()) << where;
      for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(final_obs[3 * i + k], c["obs"][t][k].get<float>()) << where << " final_obs[" << k << "]";
        if (!done) {
          EXPECT_EQ(obs[3 * i + k], c["obs"][t][k].get<float>()) << where << " obs[" << k << "]";
        }
      }
      for (int k = 0; k < 2 && !done; ++k) EXPECT_EQ(state[2 * i + k], c["states"][t][k].get<double>()) << where;
      clipped_torque += std::abs(u[i]) > 2.0f;
      clipped_speed += std::abs(c["states"][t][1].get<double>()) == 8.0;
      wrapped += std::abs(c["states"][t][0].get<double>()) > kPi;
    }
  }
  // The goldens exercise the torque clip, the speed clip and angle_normalize's wrap.
  EXPECT_GT(clipped_torque, 0);
  EXPECT_GT(clipped_speed, 0);
  EXPECT_GT(wrapped, 0);
}

TEST(Pendulum, ResetDrawsThetaAndSpeedFromEachCopysStream) {
  Pendulum env(512);
  Tensor obs = env.reset(2);
  const std::vector<double> s = env.state().to_vector<double>();
  const std::vector<float> o = obs.to_vector<float>();
  double min_th = 10, max_th = -10;
  for (int64_t i = 0; i < 512; ++i) {
    const double th = s[2 * i], thdot = s[2 * i + 1];
    EXPECT_GE(th, -kPi);
    EXPECT_LT(th, kPi);
    EXPECT_GE(thdot, -1.0);
    EXPECT_LT(thdot, 1.0);
    min_th = std::min(min_th, th), max_th = std::max(max_th, th);
    EXPECT_EQ(o[3 * i], float(std::cos(th)));
    EXPECT_EQ(o[3 * i + 1], float(std::sin(th)));
    EXPECT_EQ(o[3 * i + 2], float(thdot));
  }
  EXPECT_LT(min_th, -3.0);  // the whole circle is drawn
  EXPECT_GT(max_th, 3.0);
  // Copy 7's (theta, theta_dot) are uniform_'s two draws from its stream,
  // scaled to each bound (one Philox block).
  Generator g = env_generator(2, 7);
  const std::vector<double> u = uniform_(Tensor::empty({2}, kF64), 0.0, 1.0, g).to_vector<double>();
  EXPECT_NEAR(s[14], -kPi + 2 * kPi * u[0], 1e-15);
  EXPECT_NEAR(s[15], -1.0 + 2.0 * u[1], 1e-15);
}

TEST(Pendulum, TruncatesAt200AndStartsTheNextEpisode) {
  Pendulum a(3), b(1);
  a.reset(4);
  b.reset(4);
  for (int t = 1; t <= 200; ++t) {
    Transition ta = a.step(torques({1.0f, -1.0f, 0.5f}));
    Transition tb = b.step(torques({1.0f}));
    EXPECT_TRUE(testing::equal(narrow(ta.obs, 0, 0, 1), tb.obs)) << t;  // copy 0 does not depend on E
    const std::vector<bool> trunc = ta.truncated.to_vector<bool>();
    EXPECT_EQ(trunc, std::vector<bool>(3, t == 200)) << t;
    EXPECT_EQ(ta.terminated.to_vector<bool>(), std::vector<bool>(3, false));
    if (t < 200) {
      EXPECT_TRUE(testing::equal(ta.obs, ta.final_obs)) << t;
    } else {
      EXPECT_FALSE(testing::equal(ta.obs, ta.final_obs));
      EXPECT_EQ(a.elapsed_steps().to_vector<int64_t>(), std::vector<int64_t>(3, 0));
      // The new episode is the copy's next draw (after the first reset's block).
      Generator g = env_generator(4, 1);
      g.advance(1);
      const std::vector<double> u = uniform_(Tensor::empty({2}, kF64), 0.0, 1.0, g).to_vector<double>();
      EXPECT_NEAR(a.state().to_vector<double>()[2], -kPi + 2 * kPi * u[0], 1e-15);
    }
  }
}

TEST(Pendulum, TorquesOutsideTheBoundsAreClipped) {
  Pendulum a(3), b(3);
  a.reset(1);
  b.reset(1);
  const float inf = std::numeric_limits<float>::infinity();
  Transition ta = a.step(torques({5.0f, -2.5f, inf}));
  Transition tb = b.step(torques({2.0f, -2.0f, 2.0f}));
  EXPECT_TRUE(testing::equal(ta.obs, tb.obs));
  EXPECT_TRUE(testing::equal(ta.reward, tb.reward));  // the cost uses the clipped torque
  EXPECT_TRUE(testing::equal(a.state(), b.state()));
}

TEST(Pendulum, BadCallsAreErrorsAndChangeNothing) {
  EXPECT_KILN_ERROR(Pendulum(-1), "[Pendulum] num_envs must be positive, got -1");
  Pendulum env(3);
  EXPECT_KILN_ERROR(env.step(torques({0, 0, 0})), "[Pendulum.step] Pendulum-v1 was stepped before reset()");
  env.reset(0);
  env.step(torques({0.5f, 0.5f, 0.5f}));
  const Tensor state = env.state(), elapsed = env.elapsed_steps();
  EXPECT_KILN_ERROR(env.step(zeros({3})),
                    "[Pendulum.step] actions [3] f32 do not match Pendulum-v1's action space Box([1], f32) for 3 "
                    "copies: expected [3, 1] f32");
  EXPECT_KILN_ERROR(env.step(zeros({3, 1}, {.dtype = kF64})), "actions [3, 1] f64 do not match");
  EXPECT_KILN_ERROR(env.step(zeros({2, 1})), "actions [2, 1] f32 do not match");
  EXPECT_KILN_ERROR(env.step(torques({0.0f, std::nanf(""), 1.0f})),
                    "[Pendulum.step] actions[1, 0] is NaN: Pendulum-v1 takes torques in [-2, 2] (others are clipped)");
  EXPECT_KILN_ERROR(env.set_state(zeros({3, 3}, {.dtype = kF64})),
                    "[Pendulum.set_state] state must be [3, 2] f64 (theta, theta_dot per copy), got [3, 3] f64");
  EXPECT_TRUE(testing::equal(env.state(), state));
  EXPECT_TRUE(testing::equal(env.elapsed_steps(), elapsed));
}

}  // namespace
}  // namespace kiln::rl
