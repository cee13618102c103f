// `kiln rl dqn` / `kiln rl sac`, short: a few hundred steps must evaluate at
// every eval_every, log one CSV row per evaluation and checkpoint the run; a
// run stopped at a checkpoint and resumed must end as one run straight
// through (networks, targets, Adam, replay buffer, log); bad options are
// named errors before anything is written.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/kiln/rl_offpolicy.h"
#include "kiln/io/checkpoint.h"
#include "kiln/io/safetensors.h"
#include "tests/support/apps_testing.h"

namespace kiln::app {
namespace {

TEST(RlOffPolicyJob, DqnAndSacEvaluateLogAndCheckpoint) {
  for (const std::string algo : {"dqn", "sac"}) {
    const std::string out = kiln::testing::fresh_dir();
    std::ostringstream log;
    OffPolicyJobResult r =
        run_offpolicy({.algo = algo, .total_steps = 400, .out = out, .eval_every = 200, .eval_episodes = 1, .log = &log});
    EXPECT_EQ(r.global_step, 400) << algo;
    EXPECT_TRUE(std::isfinite(r.eval_return)) << algo;
    EXPECT_EQ(r.target_return, algo == "dqn" ? 475 : -200);
    EXPECT_EQ(int64_t(kiln::testing::read_lines(r.csv).size()), 1 + 2) << algo;  // header, evaluations at 200 and 400
    ASSERT_TRUE(std::filesystem::exists(r.checkpoint)) << algo;
    const nlohmann::json config = nlohmann::json::parse(io::read_checkpoint_info(r.checkpoint).config);
    EXPECT_EQ(config["job"], algo);
    EXPECT_EQ(config["env"], algo == "dqn" ? "CartPole-v1" : "Pendulum-v1");
    EXPECT_EQ(config["total_steps"], 400);
    // The learning rates, a column each.
    EXPECT_EQ(kiln::testing::read_lines(r.csv)[0],
              algo == "dqn" ? "global_step,seconds,train_return,eval_return,eval_std,learning_rate"
                            : "global_step,seconds,train_return,eval_return,eval_std,policy_lr,q_lr");
    EXPECT_NE(log.str().find("after 400 steps"), std::string::npos) << log.str();
  }
}

// A CSV row without its seconds column (the second), which differs between runs.
std::string without_seconds(const std::string& row) {
  const size_t a = row.find(','), b = row.find(',', a + 1);
  return row.substr(0, a) + row.substr(b);
}

void expect_same_tensors(const std::string& a, const std::string& b) {
  nn::StateDict x = io::load_safetensors(a), y = io::load_safetensors(b);
  ASSERT_EQ(x.keys(), y.keys());
  for (const auto& [key, t] : x) {
    const Tensor& u = y.at(key);
    ASSERT_EQ(t.shape(), u.shape()) << key;
    EXPECT_EQ(t.to(kF64).to_vector<double>(), u.to(kF64).to_vector<double>()) << key;
  }
}

// Straight through vs. stopped after its first checkpoints and resumed with
// --resume latest: the same final checkpoint, evaluations and log.
void expect_exact_resume(const OffPolicyJobOptions& base, int64_t stop_after) {
  const std::string straight_dir = kiln::testing::fresh_dir("straight"), split_dir = kiln::testing::fresh_dir("split");
  std::ostringstream log;
  OffPolicyJobOptions o = base;
  o.log = &log;
  o.out = straight_dir;
  const OffPolicyJobResult straight = run_offpolicy(o);

  o.out = split_dir;
  o.max_steps = stop_after;
  const OffPolicyJobResult first = run_offpolicy(o);
  ASSERT_EQ(first.global_step, stop_after) << base.algo;
  o.max_steps = 0;
  o.resume = "latest";
  const OffPolicyJobResult resumed = run_offpolicy(o);
  EXPECT_NE(log.str().find("continuing at step " + std::to_string(stop_after)), std::string::npos) << log.str();
  EXPECT_EQ(resumed.global_step, straight.global_step) << base.algo;
  EXPECT_EQ(resumed.eval_return, straight.eval_return) << base.algo;
  EXPECT_EQ(resumed.solved_step, straight.solved_step) << base.algo;
  // Networks, targets, Adam's moments and the replay buffer, bit for bit.
  expect_same_tensors(straight.checkpoint, resumed.checkpoint);
  const std::vector<std::string> a = kiln::testing::read_lines(straight.csv), b = kiln::testing::read_lines(resumed.csv);
  ASSERT_EQ(a.size(), b.size()) << base.algo;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(without_seconds(a[i]), without_seconds(b[i])) << "row " << i;
  std::filesystem::remove_all(straight_dir);
  std::filesystem::remove_all(split_dir);
}

TEST(RlOffPolicyJob, DqnResumeIsExact) {
  // DQN's default learning_starts is 10k steps: 1000 learning steps past it,
  // checkpoints every 250 (the split run stops at the 10 500th step).
  expect_exact_resume({.algo = "dqn", .seed = 4, .total_steps = 11'000, .eval_every = 500, .eval_episodes = 1}, 10'500);
}

TEST(RlOffPolicyJob, SacResumeIsExact) {
  // SAC learns from step 5000: 300 steps of updates, stopped after 5200.
  expect_exact_resume({.algo = "sac", .seed = 2, .total_steps = 5'300, .eval_every = 100, .eval_episodes = 1}, 5'200);
}

TEST(RlOffPolicyJob, ResumeChecksTheRun) {
  const std::string dir = kiln::testing::fresh_dir();
  std::ostringstream log;
  EXPECT_KILN_ERROR(run_offpolicy({.algo = "dqn", .total_steps = 200, .out = dir, .resume = "latest", .log = &log}),
                    "--resume latest: no checkpoint in");
  run_offpolicy({.algo = "dqn", .total_steps = 200, .out = dir, .eval_every = 100, .eval_episodes = 1, .log = &log});
  EXPECT_KILN_ERROR(run_offpolicy({.algo = "dqn", .seed = 9, .total_steps = 200, .out = dir, .resume = "latest",
                                   .log = &log}),
                    "the checkpoint was trained with seed 1, this run asks for 9 (--seed)");
  EXPECT_KILN_ERROR(run_offpolicy({.algo = "sac", .total_steps = 200, .out = dir, .resume = "latest", .log = &log}),
                    "not a checkpoint of `kiln rl sac`");
  // A finished run resumed has nothing left to do.
  const OffPolicyJobResult r =
      run_offpolicy({.algo = "dqn", .total_steps = 200, .out = dir, .resume = "latest", .eval_every = 100,
                     .eval_episodes = 1, .log = &log});
  EXPECT_EQ(r.global_step, 200);
  std::filesystem::remove_all(dir);
}

TEST(RlOffPolicyJob, BadOptionsAreNamedErrors) {
  const std::string out = kiln::testing::fresh_dir() + "/run";
  EXPECT_KILN_ERROR(run_offpolicy({.algo = "ppo", .out = out}), "dqn or sac");
  EXPECT_KILN_ERROR(run_offpolicy({.algo = "dqn", .env = "pendulum", .out = out}), "environment must be cartpole");
  EXPECT_KILN_ERROR(run_offpolicy({.algo = "sac", .out = out, .eval_episodes = 0}), "--eval-episodes");
  EXPECT_KILN_ERROR(run_offpolicy({.algo = "sac", .total_steps = -1, .out = out}), "--total-steps");
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace kiln::app
