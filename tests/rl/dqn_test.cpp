// Tests of rl::DQN: one update against CleanRL's dqn.py run in PyTorch
// (tools/goldens/rl_offpolicy.py) for both losses with and without double
// DQN, the epsilon schedule, learning a bandit, reproducibility from the
// seed, checkpoint resume equal to an uninterrupted run, evaluate_policy on
// a policy function, and errors.
#include <cmath>

#include "kiln/rl/dqn.h"
#include "kiln/rl/evaluate.h"
#include "tests/rl/golden_state.h"
#include "tests/rl/toy_envs.h"
#include "tests/support/rl_testing.h"

namespace kiln::rl {
namespace {

using kiln::testing::all_close;
using kiln::testing::expect_state_dict;
using kiln::testing::golden;
using kiln::testing::golden_state_dict;
using kiln::testing::golden_tensor;
using rl::toy::BanditEnv;
using rl::toy::ContinuousBanditEnv;

ReplayBatch golden_batch(const nlohmann::json& j) {
  return {.obs = golden_tensor(j.at("obs")).to(kF32),
          .action = golden_tensor(j.at("action")),
          .reward = golden_tensor(j.at("reward")).to(kF32),
          .next_obs = golden_tensor(j.at("next_obs")).to(kF32),
          .terminated = golden_tensor(j.at("terminated"))};
}

TEST(RlDqnUpdate, MatchesCleanRLsUpdateInPyTorch) {
  const auto& g = golden("rl_dqn");
  const auto& args = g.at("args");
  const ReplayBatch batch = golden_batch(g.at("batch"));
  for (const auto& c : g.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    auto env = make_vector_env("CartPole-v1", 1);
    DQN dqn(*env, {.learning_rate = args.at("learning_rate").get<double>(),
                   .gamma = args.at("gamma").get<double>(),
                   .tau = args.at("tau").get<double>(),
                   .huber = c.at("args").at("huber").get<bool>(),
                   .double_q = c.at("args").at("double_q").get<bool>(),
                   .hidden = args.at("hidden").get<std::vector<int64_t>>()});
    dqn.q_network().load_state_dict(golden_state_dict(g.at("q")));
    dqn.target_network().load_state_dict(golden_state_dict(g.at("target")));
    DQNUpdate u = dqn.update(batch);
    const auto& out = c.at("out");
    EXPECT_NEAR(u.td_loss, out.at("loss").get<double>(), 1e-5 * std::abs(out.at("loss").get<double>()) + 1e-6);
    EXPECT_NEAR(u.q_value, out.at("q_value").get<double>(), 1e-6);
    for (const auto& [name, p] : dqn.q_network().named_parameters()) {
      SCOPED_TRACE("grad of " + name);
      EXPECT_TRUE(all_close(p.grad(), golden_tensor(out.at("grads").at(name)).to(kF32), 1e-4, 1e-6));
    }
    expect_state_dict(dqn.q_network(), out.at("q_after"), "", 1e-5, 1e-6);
    dqn.update_target();
    expect_state_dict(dqn.target_network(), out.at("target_after"), "", 1e-5, 1e-6);
    EXPECT_EQ(dqn.updates(), 1);
  }
}

TEST(RlDqn, EpsilonFallsLinearlyThenStays) {
  EXPECT_DOUBLE_EQ(linear_schedule(1.0, 0.05, 100, 0), 1.0);
  EXPECT_DOUBLE_EQ(linear_schedule(1.0, 0.05, 100, 50), 0.525);
  EXPECT_DOUBLE_EQ(linear_schedule(1.0, 0.05, 100, 100), 0.05);
  EXPECT_DOUBLE_EQ(linear_schedule(1.0, 0.05, 100, 1e6), 0.05);
  EXPECT_DOUBLE_EQ(linear_schedule(0.0, 1.0, 10, 20), 1.0);  // rising schedules clip at the end too
  EXPECT_DOUBLE_EQ(linear_schedule(1.0, 0.05, 0, 0), 0.05);
  BanditEnv env(4);
  // CleanRL: duration exploration_fraction * total_timesteps = 0.5 * 1000.
  DQN dqn(env, {.total_timesteps = 1000, .buffer_size = 100, .learning_starts = 100, .hidden = {4}});
  EXPECT_DOUBLE_EQ(dqn.epsilon(0), 1.0);
  EXPECT_DOUBLE_EQ(dqn.epsilon(250), 1.0 + (0.05 - 1.0) / 500.0 * 250.0);
  EXPECT_DOUBLE_EQ(dqn.epsilon(500), 0.05);
  EXPECT_DOUBLE_EQ(dqn.epsilon(999), 0.05);
}

DQNOptions bandit_options(uint64_t seed) {
  return {.total_timesteps = 4 * 400, .learning_rate = 1e-2, .buffer_size = 512, .target_network_frequency = 20,
          .batch_size = 32, .exploration_fraction = 0.5, .learning_starts = 128, .train_frequency = 1,
          .hidden = {16}, .seed = seed};
}

TEST(RlDqn, LearnsTheBestArmOfABandit) {
  BanditEnv env(4);
  DQN dqn(env, bandit_options(3));
  int64_t windows = 0, episodes = 0;
  dqn.learn(
      [&](const DQNStats& s) {
        ++windows;
        episodes += s.episodes;
        EXPECT_EQ(s.global_step, s.step * 4);
        return true;
      },
      100);
  EXPECT_EQ(windows, 4);
  EXPECT_EQ(episodes, 1600);  // every step ends four episodes
  EXPECT_TRUE(dqn.done());
  EXPECT_EQ(dqn.updates(), 400 - 128 / 4);
  Tensor obs = tensor<float>({1.0f, 0.5f}, {1, 2});
  EXPECT_EQ(dqn.act(obs).item<int64_t>(), 2);
  NoGradGuard g;
  // Q of the best arm near its reward 1 (one-step episodes: no bootstrap).
  EXPECT_NEAR(dqn.q_network().forward(obs)[0][2].item<float>(), 1.0, 0.15);
  EvaluationResult r = evaluate_policy(dqn.greedy_policy(), env, {.episodes = 8});
  EXPECT_EQ(r.mean_return, 1.0);
}

TEST(RlDqn, RunsRepeatWithTheSeed) {
  auto run = [](uint64_t seed) {
    auto env = make_vector_env("CartPole-v1", 2);
    DQNOptions o = bandit_options(seed);
    o.total_timesteps = 600;
    o.double_q = true;
    DQN dqn(*env, o);
    dqn.learn();
    return dqn.q_network().state_dict();
  };
  nn::StateDict a = run(5), b = run(5), c = run(6);
  for (const auto& [k, v] : a) {
    EXPECT_TRUE(testing::equal(v, b.at(k))) << k;
    EXPECT_FALSE(testing::equal(v, c.at(k))) << k;
  }
}

TEST(RlDqn, ResumesFromACheckpointAsIfUninterrupted) {
  const std::string path = testing::fresh_dir() + "/dqn.safetensors";
  BanditEnv env(4);
  DQN dqn(env, bandit_options(9));
  for (int i = 0; i < 100; ++i) dqn.step();  // past learning_starts: updates and target copies happened
  io::Checkpoint ckpt;
  dqn.checkpoint(ckpt);
  ckpt.save(path);

  // Another seed: other weights and generators until the checkpoint loads.
  BanditEnv env2(4);
  DQN dqn2(env2, bandit_options(10));
  io::Checkpoint ckpt2;
  dqn2.checkpoint(ckpt2);
  ckpt2.load(path);
  EXPECT_EQ(dqn2.steps(), 100);
  EXPECT_EQ(dqn2.updates(), dqn.updates());
  EXPECT_EQ(dqn2.replay_buffer().size(), 400);
  EXPECT_EQ(dqn2.state(), dqn.state());
  // The bandit's resets do not matter, so both continue identically.
  for (int i = 0; i < 50; ++i) dqn.step(), dqn2.step();
  for (auto* pair : {&dqn, &dqn2}) EXPECT_EQ(pair->steps(), 150);
  for (auto [m1, m2] : {std::pair<nn::Module*, nn::Module*>{&dqn.q_network(), &dqn2.q_network()},
                        {&dqn.target_network(), &dqn2.target_network()}}) {
    nn::StateDict a = m1->state_dict(), b = m2->state_dict();
    for (const auto& [k, v] : a) EXPECT_TRUE(testing::equal(v, b.at(k))) << k;
  }
  EXPECT_EQ(dqn2.state(), dqn.state());

  // A state of another shape is refused and changes nothing.
  BanditEnv env3(2);
  DQN dqn3(env3, bandit_options(9));
  EXPECT_KILN_ERROR(dqn3.load_state(dqn.state()), "[DQN] the state is of 4 environments, this DQN runs 2");
  EXPECT_EQ(dqn3.steps(), 0);
  io::State st = dqn.state();
  st["step"] = "100000";
  EXPECT_KILN_ERROR(dqn2.load_state(st), "[DQN] the state is at step 100000");
  EXPECT_EQ(dqn2.steps(), 150);
}

TEST(RlEvaluate, TakesAnyPolicyFunction) {
  BanditEnv env(3);
  int64_t calls = 0;
  Policy best = [&](const Tensor& obs) {
    ++calls;
    EXPECT_FALSE(GradMode::is_enabled());
    return full({obs.size(0)}, int64_t(2), {.dtype = kI64});
  };
  EvaluationResult r = evaluate_policy(best, env, {.episodes = 7});
  EXPECT_EQ(r.returns.size(), 7u);
  EXPECT_DOUBLE_EQ(r.mean_return, 1.0);  // (a mean of sevenths)
  EXPECT_NEAR(r.std_return, 0.0, 1e-12);
  EXPECT_EQ(calls, 3);  // copies finish (7 + i) / 3 = 2, 2, 3 episodes of one step
  EXPECT_KILN_ERROR(evaluate_policy(Policy(), env), "[evaluate_policy] the policy is empty");
}

TEST(RlDqn, BadOptionsAndInputsAreErrors) {
  BanditEnv env(2);
  EXPECT_KILN_ERROR(DQN(env, {.batch_size = 0}), "[DQN] total_timesteps 500000, buffer_size 10000, batch_size 0");
  EXPECT_KILN_ERROR(DQN(env, {.tau = 0}), "[DQN] needs gamma in [0, 1] and tau in (0, 1]; got 0.99, 0");
  EXPECT_KILN_ERROR(DQN(env, {.end_e = 2}), "[DQN] needs start_e and end_e in [0, 1]");
  EXPECT_KILN_ERROR(DQN(env, {.total_timesteps = 1}), "[DQN] total_timesteps 1 is less than one step of 2 environments");
  EXPECT_KILN_ERROR(DQN(env, {.hidden = {0}}), "[QNetwork] hidden sizes must be positive, got 0");
  ContinuousBanditEnv box(2, 0.5);
  EXPECT_KILN_ERROR(DQN(box, {}), "[DQN] ContinuousBandit: DQN needs Discrete(n) actions, got Box([1]");

  DQN dqn(env, {.total_timesteps = 4, .buffer_size = 8, .learning_starts = 0, .hidden = {4}});
  EXPECT_KILN_ERROR(dqn.act(zeros({3, 5})), "[QNetwork] observations must be [B, 2], got");
  EXPECT_KILN_ERROR(dqn.learn({}, 0), "[DQN] stats_every must be positive, got 0");
  dqn.step(), dqn.step();
  EXPECT_KILN_ERROR(dqn.step(), "[DQN] all 2 steps of total_timesteps 4 are done");
  Generator gen(0);
  ReplayBatch b = dqn.replay_buffer().sample(4, gen);
  EXPECT_KILN_ERROR(dqn_loss(zeros({4, 3}), zeros({4, 2}), {}, b, {}), "[dqn_loss] q [4, 3]");
  EXPECT_KILN_ERROR(dqn_loss(zeros({4, 3}), zeros({4, 3}), {}, b, {.double_q = true}),
                    "(double_q) next_online_q an undefined tensor");
}

}  // namespace
}  // namespace kiln::rl

namespace kiln::rl {
namespace {

// Caller-owned networks (as PPO takes its ActorCritic): the DQN trains the
// caller's objects; built as DQN(env, options) builds its own, they give the
// same run bit for bit; other widths train; misuse is a named error.
TEST(RlDqn, TrainsCallerOwnedNetworks) {
  const DQNOptions o = bandit_options(5);
  BanditEnv env(4);
  DQN own(env, o);
  own.learn();

  BanditEnv env2(4);
  Rngs rngs{{"params", 5}};
  QNetwork q(env2.spec(), nn::Init(rngs), o.hidden), target(env2.spec(), nn::Init(rngs), o.hidden);
  DQN dqn(env2, q, target, o);
  EXPECT_EQ(&dqn.q_network(), &q);
  EXPECT_EQ(&dqn.target_network(), &target);
  dqn.learn();
  EXPECT_EQ(dqn.updates(), own.updates());
  for (auto [mine, theirs] : {std::pair<nn::Module*, nn::Module*>{&q, &own.q_network()},
                              {&target, &own.target_network()}}) {
    nn::StateDict a = mine->state_dict(), b = theirs->state_dict();
    for (const auto& [k, v] : a) EXPECT_TRUE(testing::equal(v, b.at(k))) << k;
  }

  // Two hidden layers of 8 instead of one of 16: trained, and the target a copy.
  BanditEnv env3(4);
  Rngs other{{"params", 1}};
  QNetwork deep(env3.spec(), nn::Init(other), {8, 8}), deep_target(env3.spec(), nn::Init(other), {8, 8});
  const Tensor before = deep.state_dict().at("network.0.weight").clone();
  DQN d3(env3, deep, deep_target, o);
  EXPECT_TRUE(testing::equal(deep_target.state_dict().at("network.4.weight"), deep.state_dict().at("network.4.weight")));
  d3.learn();
  EXPECT_FALSE(testing::equal(deep.state_dict().at("network.0.weight"), before));

  EXPECT_KILN_ERROR(DQN(env3, deep, deep, o), "[DQN] q_network and target_network must be two networks, got one twice");
  EXPECT_THROW(DQN(env3, deep, target, o), Error);  // {8, 8} into {16}: load_state_dict names the key
  BanditEnv two_arms(4, 2, 1);
  EXPECT_KILN_ERROR(DQN(two_arms, q, target, o), "[DQN] q_network has 3 actions, Bandit has 2");
}

}  // namespace
}  // namespace kiln::rl
