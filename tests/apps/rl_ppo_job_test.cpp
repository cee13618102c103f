// `kiln rl ppo`, short: a few thousand CartPole steps must log, evaluate and
// checkpoint; a run stopped at a checkpoint and resumed must end with the same
// parameters, optimizer state and log as one run straight through (CartPole,
// and Pendulum with its observation and reward normalisation); bad options
// and mismatched checkpoints are named errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/kiln/rl.h"
#include "kiln/io/checkpoint.h"
#include "kiln/io/safetensors.h"
#include "tests/support/apps_testing.h"

namespace kiln::app {
namespace {

// A CSV row without its timing columns (seconds, steps_per_second), which
// differ between runs.
std::string without_timing(const std::string& row) {
  std::vector<std::string> cells;
  std::stringstream in(row);
  for (std::string c; std::getline(in, c, ',');) cells.push_back(c);
  std::string out;
  for (size_t i = 0; i < cells.size(); ++i)
    if (i != 2 && i != 13) out += cells[i] + ",";
  return out;
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

TEST(RlPpoJob, CartPoleSmoke) {
  std::string dir = kiln::testing::fresh_dir();
  std::ostringstream log;
  // 4 envs x 32 steps: 32 iterations of 128; evaluations (and checkpoints) at 2048 and 4096.
  PPOJobResult r = run_ppo({.env = "cartpole", .seed = 3, .total_steps = 4096, .envs = 4, .out = dir,
                            .eval_every = 2048, .eval_episodes = 4, .log = &log});
  EXPECT_EQ(r.iterations, 32);
  EXPECT_EQ(r.global_step, 4096);
  EXPECT_EQ(r.target_return, 475);
  // CartPole's returns are episode lengths: at least 8, at most 500.
  EXPECT_GE(r.eval_return, 8);
  EXPECT_LE(r.eval_return, 500);
  std::vector<std::string> rows = kiln::testing::read_lines(r.csv);
  ASSERT_EQ(rows.size(), 1u + 32u);
  EXPECT_EQ(rows[0].substr(0, 22), "iteration,global_step,");
  EXPECT_EQ(rows[1].substr(0, 7), "1,128,0");
  const nlohmann::json config = nlohmann::json::parse(io::read_checkpoint_info(r.checkpoint).config);
  EXPECT_EQ(config["job"], "ppo");
  EXPECT_EQ(config["env"], "CartPole-v1");
  EXPECT_EQ(config["seed"], 3);
  EXPECT_TRUE(std::filesystem::exists(dir + "/checkpoints/step-2048.safetensors"));
  std::string text = log.str();
  EXPECT_NE(text.find("ppo CartPole-v1: 9155 parameters · 4 envs x 32 steps · 32 iterations of 128 steps · seed 3"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("iter 32/32 · step 4096 · return "), std::string::npos) << text;
  EXPECT_NE(text.find("eval step 2048: "), std::string::npos) << text;
  EXPECT_NE(text.find("CartPole-v1 after 4096 steps"), std::string::npos) << text;
  std::filesystem::remove_all(dir);
}

// Straight through vs. stopped at the first checkpoint and resumed.
void expect_exact_resume(const PPOJobOptions& base, int64_t stop_at) {
  std::string straight_dir = kiln::testing::fresh_dir("straight"), split_dir = kiln::testing::fresh_dir("split");
  std::ostringstream log;
  PPOJobOptions o = base;
  o.log = &log;
  o.out = straight_dir;
  PPOJobResult straight = run_ppo(o);

  o.out = split_dir;
  o.max_iterations = stop_at;
  PPOJobResult first = run_ppo(o);
  EXPECT_EQ(first.iterations, stop_at);
  o.max_iterations = 0;
  o.resume = "latest";
  PPOJobResult resumed = run_ppo(o);
  EXPECT_EQ(resumed.iterations, straight.iterations);
  EXPECT_EQ(resumed.global_step, straight.global_step);
  EXPECT_EQ(resumed.eval_return, straight.eval_return);
  EXPECT_EQ(resumed.solved_step, straight.solved_step);
  expect_same_tensors(straight.checkpoint, resumed.checkpoint);  // parameters, buffers, Adam's moments
  std::vector<std::string> a = kiln::testing::read_lines(straight.csv);
  std::vector<std::string> b = kiln::testing::read_lines(resumed.csv);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(without_timing(a[i]), without_timing(b[i])) << "row " << i;
  std::filesystem::remove_all(straight_dir);
  std::filesystem::remove_all(split_dir);
}

TEST(RlPpoJob, CartPoleResumeIsExact) {
  // 32 iterations of 128 steps, checkpoints every 1024: stop after 8 iterations.
  expect_exact_resume({.env = "cartpole", .seed = 5, .total_steps = 4096, .envs = 4, .eval_every = 1024,
                       .eval_episodes = 2},
                      8);
}

TEST(RlPpoJob, PendulumResumeIsExact) {
  // 1 env x 512 steps (32 minibatches of 16, 10 epochs): 3 iterations,
  // checkpoints every 1024 steps; the normalisers' statistics ride along.
  expect_exact_resume({.env = "pendulum", .seed = 2, .total_steps = 1536, .envs = 1, .eval_every = 1024,
                       .eval_episodes = 1},
                      2);
}

TEST(RlPpoJob, Errors) {
  std::ostringstream log;
  std::string dir = kiln::testing::fresh_dir();
  EXPECT_KILN_ERROR(run_ppo({.env = "mujoco", .out = dir, .log = &log}),
                    "no PPO preset for 'mujoco'; known: cartpole, pendulum");
  EXPECT_KILN_ERROR(run_ppo({.total_steps = -5, .out = dir, .log = &log}), "--total-steps must be positive, got -5");
  EXPECT_KILN_ERROR(run_ppo({.envs = -1, .out = dir, .log = &log}), "--envs must be positive, got -1");
  EXPECT_KILN_ERROR(run_ppo({.out = dir, .eval_every = -1, .log = &log}), "--eval-every must be non-negative");
  EXPECT_KILN_ERROR(run_ppo({.out = dir, .eval_episodes = 0, .log = &log}), "--eval-episodes must be positive, got 0");
  EXPECT_KILN_ERROR(run_ppo({.total_steps = 100, .out = dir, .log = &log}),
                    "total_timesteps 100 is less than one rollout of 256 steps");
  EXPECT_KILN_ERROR(run_ppo({.out = dir, .resume = "latest", .log = &log}), "--resume latest: no checkpoint in");

  // A checkpoint of 2 environments does not resume with 4, nor as Pendulum.
  run_ppo({.total_steps = 512, .envs = 2, .out = dir, .eval_episodes = 1, .log = &log});
  // The config names the changed flag first; accepted with --override, the
  // rollout state still cannot take 4 environments.
  EXPECT_KILN_ERROR(run_ppo({.total_steps = 1024, .envs = 4, .out = dir, .resume = "latest", .log = &log}),
                    "the checkpoint was trained with envs 2, this run asks for 4 (--envs)");
  EXPECT_KILN_ERROR(run_ppo({.total_steps = 1024, .envs = 4, .out = dir, .resume = "latest",
                             .overrides = {"envs", "total-steps"}, .log = &log}),
                    "the state is of 2 environments x 32 steps, this PPO runs 4 x 32");
  EXPECT_KILN_ERROR(
      run_ppo({.env = "pendulum", .total_steps = 1024, .envs = 2, .out = dir, .resume = "latest", .log = &log}),
                    "is a run of CartPole-v1, not Pendulum-v1");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln::app
