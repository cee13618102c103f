// --compile on the jobs (docs/compile.md): the same run as without it, bit
// for bit (metrics and checkpoint tensors), and a run resumes across the two.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "apps/kiln/fashion_mnist.h"
#include "apps/kiln/lm.h"
#include "apps/kiln/rl.h"
#include "apps/kiln/rl_offpolicy.h"
#include "kiln/io/safetensors.h"
#include "tests/support/apps_testing.h"

namespace kiln::app {
namespace {

// Every tensor of two checkpoints, equal bit for bit.
void expect_same_checkpoint(const std::string& a, const std::string& b) {
  nn::StateDict sa = io::load_safetensors(a), sb = io::load_safetensors(b);
  ASSERT_EQ(sa.keys(), sb.keys());
  for (const auto& [k, v] : sa) EXPECT_TRUE(kiln::testing::equal(v, sb.at(k))) << k;
}

// metrics.csv without the columns that measure time (they differ between runs).
std::vector<std::string> losses(const std::string& csv) {
  std::vector<std::string> lines = kiln::testing::read_lines(csv), out;
  auto split = [](const std::string& line) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) cells.push_back(cell);
    return cells;
  };
  if (lines.empty()) return out;
  std::vector<std::string> header = split(lines[0]);
  std::vector<bool> keep;
  for (const std::string& h : header)
    keep.push_back(h.find("elapsed") == std::string::npos && h.find("_ms") == std::string::npos &&
                   h.find("per_s") == std::string::npos && h.find("seconds") == std::string::npos &&
                   h.find("sps") == std::string::npos && h.find("time") == std::string::npos);
  for (const std::string& line : lines) {
    std::vector<std::string> cells = split(line);
    std::string kept;
    for (size_t i = 0; i < cells.size(); ++i)
      if (i >= keep.size() || keep[i]) kept += cells[i] + ",";
    out.push_back(kept);
  }
  return out;
}

std::ostringstream& fashion_log() {
  static std::ostringstream log;
  return log;
}

FashionMnistResult fashion(const std::string& dir, bool compile, int64_t epochs, const std::string& resume = "") {
  std::ostringstream& log = fashion_log();
  FashionMnistOptions o{.model = "mlp", .epochs = epochs, .threads = 1, .out = dir, .resume = resume,
                        .limit = 640, .test_limit = 200, .compile = compile, .log = &log, .tty = false};
  return train_fashion_mnist(o);
}

TEST(CompileJob, FashionMnistWithCompileIsTheEagerRunAndResumesAcross) {
  const std::string base = kiln::testing::fresh_dir(), eager = base + "/eager", compiled = base + "/compiled";
  FashionMnistResult e1 = fashion(eager, false, 1), c1 = fashion(compiled, true, 1);
  // 640 / 64 = 10 steps: one recording, nine replays (the log says so).
  EXPECT_NE(fashion_log().str().find("compiled step: 1 recording, 9 replays, 0 eager steps"), std::string::npos)
      << fashion_log().str();
  EXPECT_EQ(e1.test_accuracy, c1.test_accuracy);
  EXPECT_EQ(losses(e1.csv), losses(c1.csv));
  expect_same_checkpoint(e1.checkpoint, c1.checkpoint);
  // The eager run resumed with --compile, the compiled one without: both
  // continue as an uninterrupted run would.
  FashionMnistResult e2 = fashion(eager, true, 2, "latest"), c2 = fashion(compiled, false, 2, "latest");
  EXPECT_EQ(e2.test_accuracy, c2.test_accuracy);
  EXPECT_EQ(losses(e2.csv), losses(c2.csv));
  expect_same_checkpoint(e2.checkpoint, c2.checkpoint);
  std::filesystem::remove_all(base);
}

TEST(CompileJob, PpoWithCompileIsTheEagerRun) {
  const std::string base = kiln::testing::fresh_dir(), eager = base + "/eager", compiled = base + "/compiled";
  std::ostringstream log;
  auto run = [&](const std::string& dir, bool compile) {
    return run_ppo({.env = "cartpole", .total_steps = 4096, .envs = 4, .out = dir, .eval_every = 2048,
                    .eval_episodes = 2, .compile = compile, .log = &log});
  };
  PPOJobResult e = run(eager, false), c = run(compiled, true);
  EXPECT_EQ(e.iterations, c.iterations);
  EXPECT_EQ(e.eval_return, c.eval_return);
  EXPECT_EQ(losses(e.csv), losses(c.csv));
  expect_same_checkpoint(e.checkpoint, c.checkpoint);
  std::filesystem::remove_all(base);
}

TEST(CompileJob, LmWithCompileIsTheEagerRun) {
  // The char GPT with AdamW, warmup + cosine schedule and gradient clipping:
  // the schedule's learning rate and the clip are read live at every replay.
  const std::string base = kiln::testing::fresh_dir(), eager = base + "/eager", compiled = base + "/compiled";
  const std::string data = testing::corpus_slice(base, 8000);
  std::ostringstream log;
  auto run = [&](const std::string& dir, bool compile) {
    return train_lm({.data = data, .n_layer = 1, .n_head = 2, .n_embd = 32, .block_size = 16, .iters = 24,
                     .batch_size = 8, .lr = 1e-2, .min_lr = 1e-3, .warmup = 2, .eval_interval = 12, .eval_iters = 2,
                     .seed = 5, .out = dir, .log = &log, .tty = false, .compile = compile});
  };
  LmResult e = run(eager, false), c = run(compiled, true);
  // 24 steps: one recording, 23 replays (the log says so).
  EXPECT_NE(log.str().find("compiled step: 1 recording, 23 replays, 0 eager steps"), std::string::npos) << log.str();
  EXPECT_EQ(e.val_loss, c.val_loss);
  EXPECT_EQ(e.train_loss, c.train_loss);
  EXPECT_EQ(losses(e.csv), losses(c.csv));
  expect_same_checkpoint(e.checkpoint, c.checkpoint);
  std::filesystem::remove_all(base);
}

// `kiln rl dqn|sac --compile`: the same run as without it (evaluations and
// checkpoint: networks, targets, both Adams, replay buffer, generators), and
// an eager run stopped at a checkpoint and resumed with --compile ends as
// both straight runs. Past the default learning_starts (DQN 10k, SAC 5k).
void expect_offpolicy_compiled_is_eager(const OffPolicyJobOptions& base, int64_t stop_after,
                                        const std::string& compiled_line) {
  const std::string dir = kiln::testing::fresh_dir();
  std::ostringstream log;
  auto run = [&](const std::string& out, bool compile, int64_t max_steps, const std::string& resume) {
    OffPolicyJobOptions o = base;
    o.out = dir + "/" + out;
    o.compile = compile;
    o.max_steps = max_steps;
    o.resume = resume;
    o.log = &log;
    return run_offpolicy(o);
  };
  OffPolicyJobResult e = run("eager", false, 0, ""), c = run("compiled", true, 0, "");
  EXPECT_NE(log.str().find(compiled_line), std::string::npos) << log.str();
  EXPECT_EQ(e.global_step, c.global_step);
  EXPECT_EQ(e.eval_return, c.eval_return);
  EXPECT_EQ(losses(e.csv), losses(c.csv));
  expect_same_checkpoint(e.checkpoint, c.checkpoint);
  ASSERT_EQ(run("split", false, stop_after, "").global_step, stop_after);
  OffPolicyJobResult r = run("split", true, 0, "latest");
  EXPECT_EQ(r.eval_return, e.eval_return);
  EXPECT_EQ(losses(r.csv), losses(e.csv));
  expect_same_checkpoint(e.checkpoint, r.checkpoint);
  std::filesystem::remove_all(dir);
}

TEST(CompileJob, DqnWithCompileIsTheEagerRunAndResumesAcross) {
  // 10 400 steps: 40 updates (every 10th step past 10 000); the first one
  // records, the second too (the gradients now held), 38 replays.
  expect_offpolicy_compiled_is_eager(
      {.algo = "dqn", .seed = 3, .total_steps = 10'400, .eval_every = 200, .eval_episodes = 1}, 10'200,
      "compiled step: 2 recordings, 38 replays, 0 eager steps");
}

TEST(CompileJob, SacWithCompileIsTheEagerRunAndResumesAcross) {
  // 5 200 steps: 200 critic updates past 5 000 and 200 actor updates.
  expect_offpolicy_compiled_is_eager(
      {.algo = "sac", .seed = 2, .total_steps = 5'200, .eval_every = 100, .eval_episodes = 1}, 5'100,
      "compiled actor step: 2 recordings, 198 replays, 0 eager steps");
}

}  // namespace
}  // namespace kiln::app
