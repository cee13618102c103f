// Tests of rl::PPO and rl::evaluate_policy: the minibatch loss against
// CleanRL's update code run in PyTorch (tools/goldens/rl.py), learning on
// bandits (Discrete and Box), truncation bootstrapping checked by replaying
// the stored actions in a second environment, reproducibility from the seed,
// checkpoint resume, deterministic evaluation on a chain with known episodes,
// and errors.
#include <cmath>

#include "kiln/rl/evaluate.h"
#include "kiln/rl/ppo.h"
#include "tests/rl/toy_envs.h"
#include "tests/support/rl_testing.h"

namespace kiln::rl {
namespace {

using kiln::testing::all_close;
using kiln::testing::golden;
using kiln::testing::golden_tensor;
using rl::toy::BanditEnv;
using rl::toy::ChainEnv;
using rl::toy::ContinuousBanditEnv;

TEST(RlPpoLoss, MatchesCleanRLsUpdateInPyTorch) {
  for (const auto& c : golden("rl_ppo").at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const auto& a = c.at("args");
    PPOOptions o{.norm_adv = a.at("norm_adv").get<bool>(),
                 .clip_coef = a.at("clip_coef").get<double>(),
                 .clip_vloss = a.at("clip_vloss").get<bool>(),
                 .ent_coef = a.at("ent_coef").get<double>(),
                 .vf_coef = a.at("vf_coef").get<double>()};
    RolloutBatch b;
    b.log_probs = golden_tensor(c.at("logprobs"));
    b.values = golden_tensor(c.at("values"));
    b.advantages = golden_tensor(c.at("advantages"));
    b.returns = golden_tensor(c.at("returns"));
    Tensor values = golden_tensor(c.at("new_values")).requires_grad_(true);
    std::map<std::string, Tensor> leaves{{"new_values", values}};
    std::optional<ActionDistribution> pi;
    if (c.at("kind") == "categorical") {
      leaves["logits"] = golden_tensor(c.at("logits")).requires_grad_(true);
      b.actions = golden_tensor(c.at("actions"));
      pi.emplace(Space::discrete(3), leaves["logits"]);
    } else {
      leaves["mean"] = golden_tensor(c.at("mean")).requires_grad_(true);
      leaves["log_std"] = golden_tensor(c.at("log_std")).requires_grad_(true);
      b.raw_actions = golden_tensor(c.at("raw"));
      Space box = Space::box({2}, golden_tensor(c.at("low")).to_vector<double>(),
                             golden_tensor(c.at("high")).to_vector<double>());
      pi.emplace(box, leaves["mean"], leaves["log_std"]);
    }
    PPOLoss l = ppo_loss(*pi, values, b, o);
    const auto& out = c.at("out");
    EXPECT_TRUE(all_close(l.loss, golden_tensor(out.at("loss")), 1e-12, 1e-12));
    EXPECT_TRUE(all_close(l.policy_loss, golden_tensor(out.at("policy_loss")), 1e-12, 1e-12));
    EXPECT_TRUE(all_close(l.value_loss, golden_tensor(out.at("value_loss")), 1e-12, 1e-12));
    if (o.ent_coef > 0) EXPECT_TRUE(all_close(l.entropy, golden_tensor(out.at("entropy")), 1e-12, 1e-12));
    else EXPECT_FALSE(l.entropy.defined());
    EXPECT_NEAR(l.approx_kl, out.at("approx_kl").get<double>(), 1e-12);
    EXPECT_NEAR(l.clipfrac, out.at("clipfrac").get<double>(), 1e-12);
    l.loss.backward();
    for (const auto& [k, v] : c.at("grads").items()) {
      SCOPED_TRACE("grad of " + k);
      EXPECT_TRUE(all_close(leaves.at(k).grad(), golden_tensor(v), 1e-10, 1e-12));
    }
  }
}

// Probability of `action` under the agent at the bandit's observation.
double prob_of(ActorCritic& agent, int64_t action) {
  NoGradGuard g;
  return softmax(agent.evaluate(tensor<float>({1.0f, 0.5f}, {1, 2})).params, 1)[0][action].item<float>();
}

PPOOptions bandit_options(uint64_t seed) {
  return {.total_timesteps = 8 * 16 * 12, .learning_rate = 3e-3, .num_steps = 16, .num_minibatches = 2,
          .ent_coef = 0.0, .seed = seed};
}

TEST(RlPpo, LearnsTheBestArmOfABandit) {
  BanditEnv env(8);
  Rngs rngs(0);
  MlpActorCritic agent(env.spec(), rngs, {.hidden = {16}});
  EXPECT_NEAR(prob_of(agent, 2), 1.0 / 3, 0.02);  // the 0.01 head starts near uniform
  PPO ppo(env, agent, bandit_options(1));
  std::vector<PPOStats> stats;
  ppo.learn([&](const PPOStats& s) {
    stats.push_back(s);
    return true;
  });
  ASSERT_EQ(stats.size(), 12u);
  EXPECT_EQ(stats.back().iteration, 12);
  EXPECT_EQ(stats.back().global_step, 8 * 16 * 12);
  EXPECT_EQ(stats[0].episodes, 8 * 16);  // every step ends an episode
  EXPECT_NEAR(stats[0].mean_return, 1.0 / 3, 0.1);
  EXPECT_GT(stats.back().mean_return, 0.9);
  EXPECT_GT(prob_of(agent, 2), 0.9);
  EXPECT_NEAR(stats[0].learning_rate, 3e-3, 1e-12);  // annealed linearly to 0 over the run
  EXPECT_NEAR(stats[6].learning_rate, 3e-3 * (1 - 6.0 / 12), 1e-12);
  EXPECT_TRUE(ppo.done());
  EXPECT_KILN_ERROR(ppo.iterate(), "[PPO] all 12 iterations of total_timesteps 1536 are done");
  // Deterministic evaluation picks the best arm every time.
  BanditEnv eval_env(3);
  EvaluationResult r = evaluate_policy(agent, eval_env, {.episodes = 7});
  EXPECT_EQ(r.returns, std::vector<double>(7, 1.0));
  EXPECT_NEAR(r.mean_return, 1.0, 1e-12);
  EXPECT_NEAR(r.std_return, 0.0, 1e-12);
}

TEST(RlPpo, LearnsAContinuousBanditWithTheTanhGaussian) {
  ContinuousBanditEnv env(8, 1.0);
  Rngs rngs(0);
  MlpActorCritic agent(env.spec(), rngs, {.hidden = {16}});
  PPO ppo(env, agent, {.total_timesteps = 8 * 32 * 40, .learning_rate = 1e-2, .num_steps = 32,
                       .num_minibatches = 2, .ent_coef = 0.0, .seed = 3});
  std::vector<PPOStats> stats;
  ppo.learn([&](const PPOStats& s) {
    stats.push_back(s);
    return true;
  });
  // The box is [-2, 2] and the best action 1 = 2 tanh(u): the mean heads to atanh(0.5).
  EXPECT_LT(stats.front().mean_return, -1.0);
  EXPECT_GT(stats.back().mean_return, -0.1);
  ContinuousBanditEnv eval_env(2, 1.0);
  EvaluationResult r = evaluate_policy(agent, eval_env, {.episodes = 4});
  EXPECT_GT(r.mean_return, -0.02);  // |mode - 1| < 0.14
}

TEST(RlPpo, TruncatedEpisodesBootstrapFromTheirFinalObservation) {
  // A chain too long to finish in 3 steps is always truncated; replaying the
  // stored actions in a second copy of the environment recovers each final
  // observation, whose value must be the stored bootstrap.
  const int64_t E = 3, L = 6, H = 3, T = 8;
  ChainEnv env(E, L, H), replay(E, L, H);
  Rngs rngs(0);
  MlpActorCritic agent(env.spec(), rngs, {.hidden = {8}});
  PPO ppo(env, agent, {.total_timesteps = E * T, .num_steps = T, .num_minibatches = 1, .seed = 5});
  ppo.collect();
  const RolloutStorage& r = ppo.rollout();
  Tensor obs = replay.reset(5);
  int64_t truncations = 0, terminations = 0;
  NoGradGuard g;
  for (int64_t t = 0; t < T; ++t) {
    EXPECT_TRUE(testing::equal(r.obs()[t], obs)) << "step " << t;
    Transition tr = replay.step(r.actions()[t]);
    EXPECT_TRUE(testing::equal(r.truncated()[t], tr.truncated));
    EXPECT_TRUE(testing::equal(r.terminated()[t], tr.terminated));
    Tensor v = agent.value(tr.final_obs);
    for (int64_t e = 0; e < E; ++e) {
      if (tr.truncated[e].item<bool>()) {
        ++truncations;
        EXPECT_FLOAT_EQ(r.final_values()[t][e].item<float>(), v[e].item<float>());
        // No bootstrap from the next observation, which starts a new episode.
        const float want = r.rewards()[t][e].item<float>() + 0.99f * v[e].item<float>() - r.values()[t][e].item<float>();
        EXPECT_NEAR(r.advantages()[t][e].item<float>(), want, 1e-5);
      }
      terminations += tr.terminated[e].item<bool>();
    }
    obs = tr.obs;
  }
  EXPECT_GT(truncations, 3);
}

TEST(RlPpo, RunsRepeatWithTheSeed) {
  auto run = [](uint64_t seed) {
    ChainEnv env(4, 5, 8);
    Rngs rngs(0);
    MlpActorCritic agent(env.spec(), rngs, {.hidden = {8}});
    PPO ppo(env, agent, {.total_timesteps = 4 * 16 * 3, .num_steps = 16, .num_minibatches = 4, .seed = seed});
    ppo.learn();
    return agent.state_dict();
  };
  nn::StateDict a = run(7), b = run(7), c = run(8);
  for (const auto& [k, v] : a) EXPECT_TRUE(testing::equal(v, b.at(k))) << k;
  EXPECT_FALSE(testing::equal(a.at("actor.2.weight"), c.at("actor.2.weight")));
}

TEST(RlPpo, ResumesFromACheckpoint) {
  const std::string dir = testing::fresh_dir();
  const std::string path = dir + "/ppo.safetensors";
  PPOOptions o = bandit_options(9);
  o.norm_reward = true;
  BanditEnv env(8);
  Rngs rngs(0);
  MlpActorCritic agent(env.spec(), rngs, {.hidden = {16}});
  PPO ppo(env, agent, o);
  ppo.iterate();
  ppo.iterate();
  io::Checkpoint ckpt;
  ckpt.model(agent).optimizer(ppo.optimizer()).state("ppo", ppo);
  ckpt.save(path);

  // A new process's objects: other weights until the checkpoint loads.
  BanditEnv env2(8);
  Rngs rngs2(1);
  MlpActorCritic agent2(env2.spec(), rngs2, {.hidden = {16}});
  PPO ppo2(env2, agent2, o);
  io::Checkpoint ckpt2;
  ckpt2.model(agent2).optimizer(ppo2.optimizer()).state("ppo", ppo2);
  ckpt2.load(path);
  EXPECT_EQ(ppo2.iteration(), 2);
  EXPECT_EQ(ppo2.global_step(), 2 * 8 * 16);
  EXPECT_EQ(ppo2.state(), ppo.state());
  // The bandit's resets do not matter, so both continue identically.
  PPOStats s1 = ppo.iterate(), s2 = ppo2.iterate();
  EXPECT_EQ(s1.learning_rate, s2.learning_rate);
  EXPECT_EQ(s1.policy_loss, s2.policy_loss);
  nn::StateDict a = agent.state_dict(), b = agent2.state_dict();
  for (const auto& [k, v] : a) EXPECT_TRUE(testing::equal(v, b.at(k))) << k;

  // A state of another shape is refused and changes nothing.
  BanditEnv env3(4);
  PPO ppo3(env3, agent2, o);
  EXPECT_KILN_ERROR(ppo3.load_state(ppo.state()), "[PPO] the state is of 8 environments x 16 steps, this PPO runs 4 x 16");
  EXPECT_EQ(ppo3.iteration(), 0);
  PPOOptions plain = bandit_options(9);
  PPO ppo4(env3, agent2, {.total_timesteps = plain.total_timesteps, .num_steps = 32, .num_minibatches = 2});
  io::State st = ppo.state();
  st["num_envs"] = "4";
  st["num_steps"] = "32";
  EXPECT_KILN_ERROR(ppo4.load_state(st), "[PPO] the state has a reward scaler, this PPO does not");
}

TEST(RlPpo, BadOptionsAreErrors) {
  BanditEnv env(8);
  Rngs rngs(0);
  MlpActorCritic agent(env.spec(), rngs, {.hidden = {4}});
  EXPECT_KILN_ERROR(PPO(env, agent, {.num_steps = 10, .num_minibatches = 3}),
                    "[PPO] num_minibatches 3 must divide the rollout's num_steps * num_envs = 10 * 8 = 80");
  EXPECT_KILN_ERROR(PPO(env, agent, {.total_timesteps = 100}), "[PPO] total_timesteps 100 is less than one rollout of 1024 steps");
  EXPECT_KILN_ERROR(PPO(env, agent, {.gamma = 1.5}), "[PPO] gamma 1.5 and gae_lambda 0.95 must lie in [0, 1]");
  EXPECT_KILN_ERROR(PPO(env, agent, {.clip_coef = 0}), "[PPO] needs clip_coef > 0");
  EXPECT_KILN_ERROR(PPO(env, agent, {.learning_rate = -1}), "[PPO] learning_rate -1 and adam_eps 1e-05 must be positive");
}

// Always the same logits, whatever the observation; value 0.
struct FixedPolicy : ActorCritic {
  explicit FixedPolicy(std::vector<float> logits) : logits_(tensor(logits, {1, int64_t(logits.size())})) {}
  PolicyOutput evaluate(const Tensor& obs) const override {
    return {logits_.expand({obs.size(0), logits_.size(1)}).contiguous(), Tensor(), zeros({obs.size(0)})};
  }
  Tensor logits_;
};

TEST(RlEvaluate, ModeActionsOverEpisodesSplitAcrossTheCopies) {
  const int64_t E = 3, L = 6, H = 10;
  ChainEnv env(E, L, H);
  FixedPolicy right({0.0f, 0.3f});  // the mode is "move right"
  right.train();
  EvaluationResult r = evaluate_policy(right, env, {.episodes = 5, .seed = 2});
  // Targets (5 + i) / 3 = 1, 2, 2 episodes. Copy i starts at (2 + i) % 5 =
  // 2, 3, 4 and needs 5 - start steps; later episodes start at 0 (5 steps).
  // In order of ending: copy 2 (1 step), copy 1 (2), copy 0 (3), copy 2 (6), copy 1 (7).
  EXPECT_EQ(r.lengths, (std::vector<int64_t>{1, 2, 3, 5, 5}));
  EXPECT_EQ(r.returns, (std::vector<double>(5, 1.0)));
  EXPECT_NEAR(r.mean_return, 1.0, 1e-12);
  EXPECT_NEAR(r.std_return, 0.0, 1e-12);
  EXPECT_NEAR(r.mean_length, 16.0 / 5, 1e-12);
  EXPECT_EQ(r.env_steps, 7 * E);
  EXPECT_TRUE(right.is_training());  // restored

  FixedPolicy stay({0.3f, 0.0f});  // never reaches the end: truncated at H with return 0
  EvaluationResult s = evaluate_policy(stay, env, {.episodes = 4});
  EXPECT_EQ(s.lengths, (std::vector<int64_t>(4, H)));
  EXPECT_EQ(s.mean_return, 0.0);

  // Sampled actions: a mix of both, returns 1 or 0 (std from numpy's formula).
  FixedPolicy coin({0.0f, 0.0f});
  EvaluationResult c = evaluate_policy(coin, env, {.episodes = 6, .seed = 1, .deterministic = false});
  double m = 0, v = 0;
  for (double x : c.returns) m += x / 6;
  for (double x : c.returns) v += (x - m) * (x - m) / 6;
  EXPECT_DOUBLE_EQ(c.mean_return, m);
  EXPECT_NEAR(c.std_return, std::sqrt(v), 1e-12);

  EXPECT_KILN_ERROR(evaluate_policy(stay, env, {.episodes = 4, .max_steps = 5}),
                    "[evaluate_policy] Chain: 4 of 4 episodes still running after 5 steps");
  EXPECT_KILN_ERROR(evaluate_policy(stay, env, {.episodes = 0}), "episodes must be positive, got 0");
}

}  // namespace
}  // namespace kiln::rl
