// Tests of rl::SAC: one critic, actor and target update against CleanRL's
// sac_continuous_action.py run in PyTorch with the same noise
// (tools/goldens/rl_offpolicy.py), learning a continuous bandit,
// reproducibility from the seed, checkpoint resume equal to an uninterrupted
// run, and errors.
#include <cmath>

#include "kiln/rl/evaluate.h"
#include "kiln/rl/sac.h"
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

TEST(RlSacUpdate, MatchesCleanRLsUpdateInPyTorch) {
  const auto& g = golden("rl_sac");
  const auto& args = g.at("args");
  auto env = make_vector_env("Pendulum-v1", 1);
  SAC sac(*env, {.buffer_size = 16,
                 .gamma = args.at("gamma").get<double>(),
                 .tau = args.at("tau").get<double>(),
                 .policy_lr = args.at("policy_lr").get<double>(),
                 .q_lr = args.at("q_lr").get<double>(),
                 .alpha = args.at("alpha").get<double>(),
                 .hidden = args.at("hidden").get<int64_t>()});
  const auto& start = g.at("start");
  sac.actor().load_state_dict(golden_state_dict(start.at("actor")));
  nn::StateDict critics = golden_state_dict(start.at("qf1"), "qf1."), targets = golden_state_dict(start.at("qf1_target"), "qf1.");
  for (const auto& [k, v] : golden_state_dict(start.at("qf2"), "qf2.")) critics.insert(k, v);
  for (const auto& [k, v] : golden_state_dict(start.at("qf2_target"), "qf2.")) targets.insert(k, v);
  sac.critics().load_state_dict(critics);
  sac.target_critics().load_state_dict(targets);
  const auto& jb = g.at("batch");
  ReplayBatch b{.obs = golden_tensor(jb.at("obs")).to(kF32),
                .action = golden_tensor(jb.at("action")).to(kF32),
                .reward = golden_tensor(jb.at("reward")).to(kF32),
                .next_obs = golden_tensor(jb.at("next_obs")).to(kF32),
                .terminated = golden_tensor(jb.at("terminated"))};

  const auto& c = g.at("critic");
  SACCriticUpdate cu = sac.update_critics(b, golden_tensor(g.at("next_noise")).to(kF32));
  EXPECT_NEAR(cu.qf1_loss, c.at("qf1_loss").get<double>(), 1e-5 * c.at("qf1_loss").get<double>() + 1e-6);
  EXPECT_NEAR(cu.qf2_loss, c.at("qf2_loss").get<double>(), 1e-5 * c.at("qf2_loss").get<double>() + 1e-6);
  EXPECT_NEAR(cu.qf1_value, c.at("qf1_value").get<double>(), 1e-6);
  EXPECT_NEAR(cu.qf2_value, c.at("qf2_value").get<double>(), 1e-6);
  expect_state_dict(sac.critics(), c.at("qf1"), "qf1.", 1e-5, 1e-6);
  expect_state_dict(sac.critics(), c.at("qf2"), "qf2.", 1e-5, 1e-6);

  const auto& a = g.at("actor");
  SACActorUpdate au = sac.update_actor(b, golden_tensor(g.at("actor_noise")).to(kF32));
  EXPECT_NEAR(au.actor_loss, a.at("loss").get<double>(), 1e-5 * std::abs(a.at("loss").get<double>()) + 1e-6);
  EXPECT_NEAR(au.log_pi, a.at("log_pi").get<double>(), 1e-5);
  for (const auto& [name, p] : sac.actor().named_parameters()) {
    SCOPED_TRACE("grad of " + name);
    EXPECT_TRUE(all_close(p.grad(), golden_tensor(a.at("grads").at(name)).to(kF32), 1e-4, 1e-6));
  }
  expect_state_dict(sac.actor(), a.at("actor"), "", 1e-5, 1e-6);

  sac.update_targets();
  expect_state_dict(sac.target_critics(), g.at("targets_after").at("qf1_target"), "qf1.", 1e-5, 1e-6);
  expect_state_dict(sac.target_critics(), g.at("targets_after").at("qf2_target"), "qf2.", 1e-5, 1e-6);
}

SACOptions bandit_options(uint64_t seed) {
  return {.total_timesteps = 4 * 300, .buffer_size = 1024, .batch_size = 32, .learning_starts = 128,
          .policy_lr = 3e-3, .q_lr = 3e-3, .alpha = 0.02, .hidden = 32, .seed = seed};
}

TEST(RlSac, LearnsAContinuousBandit) {
  ContinuousBanditEnv env(4, 1.0);  // reward -(a - 1)^2, a in [-2, 2]
  SAC sac(env, bandit_options(3));
  int64_t episodes = 0;
  sac.learn([&](const SACStats& s) { return episodes += s.episodes, true; }, 100);
  EXPECT_EQ(episodes, 1200);
  EXPECT_TRUE(sac.done());
  const float a = sac.act(ones({1, 1})).item<float>();
  EXPECT_NEAR(a, 1.0, 0.2);
  EvaluationResult r = evaluate_policy(sac.deterministic_policy(), env, {.episodes = 4});
  EXPECT_GT(r.mean_return, -0.04);
}

TEST(RlSac, RandomActionsBeforeLearningStartsStayInTheBox) {
  ContinuousBanditEnv env(8, 0.0);  // the bandit rejects actions outside [-2, 2]
  SAC sac(env, {.total_timesteps = 8 * 20, .buffer_size = 256, .learning_starts = 8 * 20, .hidden = 4});
  sac.learn();
  EXPECT_EQ(sac.replay_buffer().size(), 160);
  Generator gen(0);
  Tensor actions = sac.replay_buffer().sample(160, gen).action;
  EXPECT_LT(max(actions).item<float>(), 2.0f);
  EXPECT_GT(min(actions).item<float>(), -2.0f);
  EXPECT_GT(max(actions).item<float>() - min(actions).item<float>(), 3.0f);  // spread over the box
}

TEST(RlSac, RunsRepeatWithTheSeed) {
  auto run = [](uint64_t seed) {
    auto env = make_vector_env("Pendulum-v1", 2);
    SACOptions o = bandit_options(seed);
    o.total_timesteps = 2 * 80;
    o.learning_starts = 64;
    SAC sac(*env, o);
    sac.learn();
    return sac.actor().state_dict();
  };
  nn::StateDict a = run(5), b = run(5), c = run(6);
  for (const auto& [k, v] : a) {
    EXPECT_TRUE(testing::equal(v, b.at(k))) << k;
    EXPECT_FALSE(testing::equal(v, c.at(k))) << k;
  }
}

TEST(RlSac, ResumesFromACheckpointAsIfUninterrupted) {
  const std::string path = testing::fresh_dir() + "/sac.safetensors";
  ContinuousBanditEnv env(4, 1.0);
  SAC sac(env, bandit_options(9));
  for (int i = 0; i < 41; ++i) sac.step();  // past learning_starts, an odd step: actor updates are due next
  io::Checkpoint ckpt;
  sac.checkpoint(ckpt);
  ckpt.save(path);

  ContinuousBanditEnv env2(4, 1.0);
  SAC sac2(env2, bandit_options(10));
  io::Checkpoint ckpt2;
  sac2.checkpoint(ckpt2);
  ckpt2.load(path);
  EXPECT_EQ(sac2.steps(), 41);
  EXPECT_EQ(sac2.state(), sac.state());
  for (int i = 0; i < 10; ++i) sac.step(), sac2.step();
  for (auto [m1, m2] : {std::pair<nn::Module*, nn::Module*>{&sac.actor(), &sac2.actor()},
                        {&sac.critics(), &sac2.critics()},
                        {&sac.target_critics(), &sac2.target_critics()}}) {
    nn::StateDict a = m1->state_dict(), b = m2->state_dict();
    for (const auto& [k, v] : a) EXPECT_TRUE(testing::equal(v, b.at(k))) << k;
  }
  EXPECT_EQ(sac2.state(), sac.state());

  ContinuousBanditEnv env3(2, 1.0);
  SAC sac3(env3, bandit_options(9));
  EXPECT_KILN_ERROR(sac3.load_state(sac.state()), "[SAC] the state is of 4 environments, this SAC runs 2");
  io::State st = sac.state();
  st.erase("noise_gen.offset");
  EXPECT_KILN_ERROR(sac2.load_state(st), "noise_gen.offset");
  EXPECT_EQ(sac2.steps(), 51);
}

TEST(RlSac, BadOptionsAndInputsAreErrors) {
  ContinuousBanditEnv env(2, 0.0);
  EXPECT_KILN_ERROR(SAC(env, {.policy_frequency = 0}), "policy_frequency 0");
  EXPECT_KILN_ERROR(SAC(env, {.q_lr = 0}), "[SAC] policy_lr 0.0003 and q_lr 0 must be positive");
  EXPECT_KILN_ERROR(SAC(env, {.alpha = -1}), "[SAC] needs gamma in [0, 1], tau in (0, 1], alpha >= 0");
  BanditEnv discrete(2);
  EXPECT_KILN_ERROR(SAC(discrete, {.buffer_size = 8}), "[SAC] Bandit: actions must be Box([A]), got Discrete(3)");
  SAC sac(env, {.total_timesteps = 4, .buffer_size = 8, .learning_starts = 0, .hidden = 4});
  EXPECT_KILN_ERROR(sac.act(zeros({3, 2})), "[SACActor] observations must be [B, 1], got [3, 2] f32");
  EXPECT_KILN_ERROR(sac.critics().qf1(zeros({3, 1}), zeros({2, 1})), "[SoftQNetwork] needs obs [B, 1] and action [B, 1]");
  sac.step(), sac.step();
  EXPECT_KILN_ERROR(sac.step(), "[SAC] all 2 steps of total_timesteps 4 are done");
  Generator gen(0);
  ReplayBatch b = sac.replay_buffer().sample(4, gen);
  EXPECT_KILN_ERROR(sac.update_actor(b, zeros({4, 2})), "[SAC] actor noise must be [B, A] = [4, 1] f32, got [4, 2] f32");
}

}  // namespace
}  // namespace kiln::rl

namespace kiln::rl {
namespace {

// Caller-owned networks: built as SAC(env, options) builds its own, the same
// run bit for bit; other widths train; misuse is a named error.
TEST(RlSac, TrainsCallerOwnedNetworks) {
  SACOptions o = bandit_options(5);
  o.total_timesteps = 4 * 80;
  o.learning_starts = 64;
  ContinuousBanditEnv env(4, 1.0);
  SAC own(env, o);
  own.learn();

  ContinuousBanditEnv env2(4, 1.0);
  Rngs rngs{{"params", 5}};
  nn::Init init(rngs);
  SACActor actor(env2.spec(), init, o.hidden);
  TwinQ critics(env2.spec(), init, o.hidden), targets(env2.spec(), init, o.hidden);
  SAC sac(env2, actor, critics, targets, o);
  EXPECT_EQ(&sac.actor(), &actor);
  EXPECT_EQ(&sac.critics(), &critics);
  EXPECT_EQ(&sac.target_critics(), &targets);
  sac.learn();
  for (auto [mine, theirs] : {std::pair<nn::Module*, nn::Module*>{&actor, &own.actor()},
                              {&critics, &own.critics()}, {&targets, &own.target_critics()}}) {
    nn::StateDict a = mine->state_dict(), b = theirs->state_dict();
    for (const auto& [k, v] : a) EXPECT_TRUE(testing::equal(v, b.at(k))) << k;
  }

  // Width 8: trained.
  ContinuousBanditEnv env3(4, 1.0);
  Rngs other{{"params", 1}};
  SACActor small(env3.spec(), nn::Init(other), 8);
  TwinQ small_q(env3.spec(), nn::Init(other), 8), small_targets(env3.spec(), nn::Init(other), 8);
  const Tensor before = small.state_dict().at("fc1.weight").clone();
  SAC s3(env3, small, small_q, small_targets, o);
  s3.learn();
  EXPECT_FALSE(testing::equal(small.state_dict().at("fc1.weight"), before));

  EXPECT_KILN_ERROR(SAC(env3, small, small_q, small_q, o),
                    "[SAC] critics and target_critics must be two modules, got one twice");
  EXPECT_THROW(SAC(env3, small, small_q, targets, o), Error);  // width 32 into 8: load_state_dict names the key
}

}  // namespace
}  // namespace kiln::rl
