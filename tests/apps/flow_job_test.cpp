// The flow matching jobs (apps/kiln/flow.h), short: a tiny DiT trained for a
// few steps writes its log, checkpoints and per-epoch sample grid, resumes,
// samples from its checkpoint, and is measured by a (briefly trained)
// Fashion-MNIST CNN; the Fréchet distance against cases with a closed form.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "apps/kiln/fashion_mnist.h"
#include "apps/kiln/flow.h"
#include "tests/apps/cli_runner.h"
#include "kiln/io/checkpoint.h"
#include "kiln/io/safetensors.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/random.h"
#include "kiln/ops/reduce.h"
#include "tests/support/apps_testing.h"

namespace kiln::app {
namespace {

FlowTrainOptions tiny_run(const std::string& out, std::ostringstream& log) {
  return {.epochs = 1, .batch_size = 64, .hidden = 32, .depth = 1, .heads = 2, .patch = 7, .sample_steps = 3,
          .seed = 1, .out = out, .limit = 256, .log = &log, .tty = false};
}

TEST(FlowJob, TrainResumeSampleAndEvaluate) {
  const std::string dir = kiln::testing::fresh_dir();
  std::ostringstream log;
  FlowTrainOptions o = tiny_run(dir + "/flow", log);
  FlowTrainResult r = train_flow(o);
  EXPECT_EQ(r.epochs, 1);
  EXPECT_TRUE(std::isfinite(r.loss)) << log.str();
  EXPECT_EQ(int64_t(kiln::testing::read_lines(r.csv).size()), 1 + 4);  // 256 / 64 steps
  EXPECT_EQ(io::read_checkpoint_info(r.checkpoint).progress.global_step, 4);
  EXPECT_EQ(r.grid, dir + "/flow/samples/epoch_001.png");
  EXPECT_TRUE(std::filesystem::exists(r.grid));
  EXPECT_NE(log.str().find("samples: " + r.grid), std::string::npos) << log.str();

  std::ostringstream log2;
  o.epochs = 2;
  o.resume = "latest";
  o.log = &log2;
  FlowTrainResult r2 = train_flow(o);
  EXPECT_EQ(r2.epochs, 2);
  EXPECT_EQ(int64_t(kiln::testing::read_lines(r2.csv).size()), 1 + 8);
  EXPECT_EQ(io::read_checkpoint_info(r2.checkpoint).progress.global_step, 8);
  EXPECT_TRUE(std::filesystem::exists(dir + "/flow/samples/epoch_002.png"));
  // A different architecture does not resume this run.
  std::ostringstream log3;
  FlowTrainOptions other = o;
  other.hidden = 64;
  other.log = &log3;
  EXPECT_KILN_ERROR(train_flow(other), "model");

  // kiln sample flow: a grid of class 3, seeded.
  std::ostringstream slog;
  FlowSampleJobOptions s{.checkpoint = dir + "/flow", .class_id = 3, .n = 6, .out = dir + "/grid.png", .nrow = 3,
                         .steps = 2, .guidance = 2.0, .seed = 5, .log = &slog};
  Tensor a = sample_flow_grid(s);
  EXPECT_EQ(a.shape(), (Shape{6, 1, 28, 28}));
  EXPECT_TRUE(std::filesystem::exists(dir + "/grid.png"));
  EXPECT_TRUE(kiln::testing::all_close(sample_flow_grid(s), a, 0, 0));  // seeded
  s.class_id = 10;
  EXPECT_KILN_ERROR(sample_flow_grid(s), "[kiln sample flow] --class 10 out of range: the model has 10 classes");

  // kiln eval flow with a briefly trained CNN.
  std::ostringstream clog;
  FashionMnistResult cnn = train_fashion_mnist(
      {.epochs = 1, .out = dir + "/cnn", .limit = 1024, .test_limit = 100, .log = &clog, .tty = false});
  std::ostringstream elog;
  FlowQuality q = evaluate_flow({.checkpoint = dir + "/flow", .classifier = dir + "/cnn", .per_class = 3,
                                 .steps = 2, .real = 60, .log = &elog});
  EXPECT_EQ(q.samples, 30);
  EXPECT_GE(q.label_agreement, 0.0);
  EXPECT_LE(q.label_agreement, 1.0);
  EXPECT_EQ(q.per_class.size(), 10u);
  EXPECT_TRUE(std::isfinite(q.frechet) && q.frechet >= 0) << q.frechet;
  EXPECT_TRUE(std::isfinite(q.frechet_baseline) && q.frechet_baseline >= 0) << q.frechet_baseline;
  EXPECT_LT(q.frechet_baseline, q.frechet);  // two real splits are closer than 4 steps of a tiny model
  EXPECT_NE(elog.str().find("label agreement: "), std::string::npos) << elog.str();
  EXPECT_NE(elog.str().find("baseline"), std::string::npos) << elog.str();
  EXPECT_KILN_ERROR(evaluate_flow({.checkpoint = dir + "/cnn", .classifier = dir + "/cnn", .log = &elog}),
                    "not a checkpoint of `kiln train flow`");
  EXPECT_KILN_ERROR(evaluate_flow({.checkpoint = dir + "/flow", .classifier = dir + "/flow", .log = &elog}),
                    "not a checkpoint of `kiln train fashion-mnist --model cnn`");
  std::filesystem::remove_all(dir);
}

// --moe-experts: every block's FFN is an nn::MoE; the routing telemetry is in
// metrics.csv and the checkpoint holds the experts (and the selection bias).
TEST(FlowJob, MoEVariantTrainsAndLogsTheRouting) {
  const std::string dir = kiln::testing::fresh_dir();
  std::ostringstream log;
  FlowTrainOptions o = tiny_run(dir + "/moe", log);
  o.moe_experts = 4;
  o.moe_top_k = 2;
  o.grids = false;
  FlowTrainResult r = train_flow(o);
  EXPECT_TRUE(std::isfinite(r.loss)) << log.str();
  const std::vector<std::string> lines = kiln::testing::read_lines(r.csv);
  ASSERT_EQ(lines.size(), 1u + 4u);
  EXPECT_NE(lines[0].find("moe/max_violation"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("moe/l0/tokens3"), std::string::npos) << lines[0];
  auto has = [keys = io::load_safetensors(r.checkpoint)](const std::string& suffix) {
    for (const auto& [key, t] : keys)
      if (key.size() >= suffix.size() && key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0) return true;
    return false;
  };
  EXPECT_TRUE(has("blocks.0.mlp.router.weight"));
  EXPECT_FALSE(has("blocks.0.mlp.0.weight"));
  EXPECT_TRUE(has("blocks.0.attn.in_proj_weight"));  // nothing else renamed
}

TEST(FlowJob, OptionErrors) {
  std::ostringstream log;
  const std::string dir = kiln::testing::fresh_dir();
  FlowTrainOptions o = tiny_run(dir + "/x", log);
  o.patch = 5;
  EXPECT_KILN_ERROR(train_flow(o), "[DiT] image_size 28 is not divisible by patch_size 5");
  o = tiny_run(dir + "/x", log);
  o.moe_experts = 2;
  o.moe_top_k = 3;
  EXPECT_KILN_ERROR(train_flow(o), "[DiT] moe_top_k 3 must be in [1, moe_experts = 2]");
  o = tiny_run(dir + "/x", log);
  o.class_dropout = 0;
  o.guidance = 3;
  EXPECT_KILN_ERROR(train_flow(o), "--guidance 3 needs label dropout in training");
  o = tiny_run(dir + "/x", log);
  o.solver = "rk4";
  EXPECT_KILN_ERROR(train_flow(o), "--solver must be euler or heun, got 'rk4'");
  EXPECT_FALSE(std::filesystem::exists(dir + "/x"));  // nothing written
  EXPECT_KILN_ERROR(load_flow(dir + "/none"), "no such file or folder");
}

// The tool itself: usage errors exit 2, job errors 1, each one line.
TEST(FlowJob, CommandLine) {
  const std::string dir = kiln::testing::fresh_dir();
  kiln::testing::CliResult r = kiln::testing::run_cli({"train", "flow", "mnist"}, dir);
  EXPECT_EQ(r.status, 2) << r.err;
  r = kiln::testing::run_cli({"sample", "flow", "--class", "3"}, dir);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("--checkpoint is required"), std::string::npos) << r.err;
  r = kiln::testing::run_cli({"sample", "flow", "--checkpoint", dir + "/none"}, dir);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("kiln: error: [load_flow] " + dir + "/none: no such file or folder"), std::string::npos) << r.err;
  r = kiln::testing::run_cli({"train", "flow", "fashion-mnist", "--patch", "5", "--out", dir + "/run"}, dir);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("image_size 28 is not divisible by patch_size 5"), std::string::npos) << r.err;
  r = kiln::testing::run_cli({"eval", "flow", "--checkpoint", dir}, dir);
  EXPECT_EQ(r.status, 2) << r.err;
  std::filesystem::remove_all(dir);
}

TEST(FrechetDistance, ClosedForms) {
  Generator g(0);
  Tensor a = randn({500, 6}, g, {.dtype = kF64});
  EXPECT_NEAR(frechet_distance(a, a), 0.0, 1e-8);
  // Equal covariances: only the means differ.
  EXPECT_NEAR(frechet_distance(a, add(a, 0.5)), 6 * 0.25, 1e-8);
  // b = 2 a about a's mean: tr(S + 4 S - 2 * 2 S) = tr(S), and the means differ by mean(a).
  Tensor centred = sub(a, mean(a, {0}, true));
  Tensor b = mul(centred, 2.0);
  const double trS = sum(var(centred, {0})).item<double>();
  EXPECT_NEAR(frechet_distance(centred, b), trS, 1e-8 * trS);
  EXPECT_KILN_ERROR(frechet_distance(a, randn({10, 5}, g)), "[frechet_distance] features a [500, 6] and b [10, 5]");
}

}  // namespace
}  // namespace kiln::app
