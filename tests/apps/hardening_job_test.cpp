// The jobs under misuse (issue 23, items 4, 5, 8, 9): a rerun never destroys
// the earlier run; a NaN loss stops training with no NaN checkpoint (or skips
// the step); a resume with a changed hyper-parameter is refused the same way
// in every job unless --override records it; a batch larger than the data is
// clamped; generate refuses a diverged checkpoint and bad options before it
// prints anything.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/kiln/fashion_mnist.h"
#include "apps/kiln/generate.h"
#include "apps/kiln/lm.h"
#include "apps/kiln/rl.h"
#include "apps/kiln/rl_offpolicy.h"
#include "kiln/io/checkpoint.h"
#include "kiln/io/checkpoint_manager.h"
#include "kiln/io/safetensors.h"
#include "tests/support/apps_testing.h"

namespace kiln::app {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A quick Fashion-MNIST run: the MLP on a few hundred images.
FashionMnistOptions small_mlp(const std::string& out, std::ostream* log) {
  return {.model = "mlp", .epochs = 1, .out = out, .limit = 256, .test_limit = 64, .log = log, .tty = false};
}

// Every model tensor of a checkpoint file is finite. (Adam's second moment
// may hold inf after gradients near 1e20 whose squares overflow f32: a valid
// state, whose updates are then 0, as in PyTorch.)
bool all_finite(const std::string& path) {
  for (const auto& [key, t] : io::load_safetensors(path)) {
    if (!is_floating(t.dtype()) || key.rfind("optim.", 0) == 0) continue;
    for (double x : t.to(kF64).to_vector<double>())
      if (!std::isfinite(x)) return false;
  }
  return true;
}

std::vector<std::string> checkpoints_in(const std::string& dir) {
  std::vector<std::string> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") out.push_back(e.path().string());
  return out;
}

std::vector<fs::path> aside_folders(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("previous-", 0) == 0) out.push_back(e.path());
  return out;
}

TEST(HardenedJobs, FashionMnistRerunNeedsOverwriteAndAFailedOneLosesNothing) {
  const std::string dir = kiln::testing::fresh_dir();
  std::ostringstream log;
  FashionMnistOptions o = small_mlp(dir, &log);
  FashionMnistResult first = train_fashion_mnist(o);
  const std::string first_csv = kiln::testing::read_bytes(first.csv);
  EXPECT_KILN_ERROR(train_fashion_mnist(o), "holds a previous run");
  EXPECT_EQ(kiln::testing::read_bytes(first.csv), first_csv);
  EXPECT_TRUE(fs::exists(first.checkpoint));

  // An --overwrite run that diverges at once (no checkpoint of its own): the
  // first run is still there, aside.
  o.overwrite = true;
  o.lr = 1e6;
  EXPECT_KILN_ERROR(train_fashion_mnist(o), "the last good checkpoint is none");
  std::vector<fs::path> aside = aside_folders(dir);
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_EQ(kiln::testing::read_bytes((aside[0] / "metrics.csv").string()), first_csv);
  EXPECT_EQ(checkpoints_in((aside[0] / "checkpoints").string()).size(), 1u);

  // An --overwrite run that writes its checkpoint removes the run it replaced.
  o.lr = 1e-3;
  FashionMnistResult second = train_fashion_mnist(o);
  EXPECT_TRUE(fs::exists(second.checkpoint));
  EXPECT_EQ(aside_folders(dir), aside);  // only the older one, from the failed run, remains
}

// The probe: --lr 1e6 used to print `loss -nan` every epoch, exit 0
// and write NaN checkpoints.
TEST(HardenedJobs, FashionMnistNanLossStopsWithoutANanCheckpoint) {
  const std::string dir = kiln::testing::fresh_dir();
  std::ostringstream log;
  FashionMnistOptions o{.model = "mlp", .epochs = 3, .lr = 1e6, .out = dir, .limit = 512, .test_limit = 128,
                        .log = &log, .tty = false};
  try {
    train_fashion_mnist(o);
    ADD_FAILURE() << "a NaN loss did not stop the run\n" << log.str();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[kiln train fashion-mnist] non-finite "), std::string::npos) << what;
    EXPECT_NE(what.find(" at step "), std::string::npos) << what;
    EXPECT_NE(what.find("no checkpoint of it was written; the last good checkpoint is "), std::string::npos) << what;
  }
  for (const std::string& path : checkpoints_in(dir + "/checkpoints")) EXPECT_TRUE(all_finite(path)) << path;

  // --on-nan skip: the run goes on, skipping such steps, and its weights stay finite.
  const std::string skip_dir = kiln::testing::fresh_dir("skip");
  std::ostringstream skip_log;
  o.out = skip_dir;
  o.on_nan = "skip";
  o.log = &skip_log;
  FashionMnistResult r = train_fashion_mnist(o);
  EXPECT_NE(skip_log.str().find("step skipped (on_nan = skip)"), std::string::npos) << skip_log.str();
  EXPECT_TRUE(all_finite(r.checkpoint));
  EXPECT_KILN_ERROR(train_fashion_mnist({.on_nan = "ignore", .log = &log}), "--on-nan must be stop or skip");
}

TEST(HardenedJobs, FashionMnistResumeRefusesAChangedLrOrSeedUnlessOverridden) {
  const std::string dir = kiln::testing::fresh_dir();
  std::ostringstream log;
  FashionMnistOptions o = small_mlp(dir, &log);
  train_fashion_mnist(o);
  o.resume = "latest";
  o.epochs = 2;  // a longer run may resume: --epochs is free
  FashionMnistOptions lr = o, seed = o;
  lr.lr = 0.5;
  seed.seed = 7;
  EXPECT_KILN_ERROR(train_fashion_mnist(lr),
                    "the checkpoint was trained with lr 0.001, this run asks for 0.5 (--lr); pass --override lr");
  EXPECT_KILN_ERROR(train_fashion_mnist(seed), "the checkpoint was trained with seed 0, this run asks for 7 (--seed)");
  lr.overrides = {"lr"};
  FashionMnistResult r = train_fashion_mnist(lr);
  EXPECT_EQ(r.epochs, 2);
  const json config = json::parse(io::read_checkpoint_info(r.checkpoint).config);
  EXPECT_EQ(config["lr"], 0.5);
  ASSERT_EQ(config["overrides"].size(), 1u);
  EXPECT_EQ(config["overrides"][0], (json{{"name", "lr"}, {"from", 0.001}, {"to", 0.5}, {"step", 4}}));
  EXPECT_NE(log.str().find("--override: lr 0.001 -> 0.5 from step 4"), std::string::npos) << log.str();
}

TEST(HardenedJobs, FashionMnistBatchLargerThanTheDataIsClamped) {
  const std::string dir = kiln::testing::fresh_dir();
  std::ostringstream log;
  FashionMnistOptions o = small_mlp(dir, &log);
  o.limit = 64;
  o.batch_size = 1'000'000'000;  // its buffers would be 1e9 x 784 floats
  FashionMnistResult r = train_fashion_mnist(o);
  EXPECT_NE(log.str().find("--batch-size 1000000000 is more than the 64 training images: using batches of 64"),
            std::string::npos)
      << log.str();
  EXPECT_EQ(io::read_checkpoint_info(r.checkpoint).progress.global_step, 1);
}

TEST(HardenedJobs, PpoResumeRefusesAChangedSeedUnlessOverridden) {
  const std::string dir = kiln::testing::fresh_dir();
  std::ostringstream log;
  PPOJobOptions o{.total_steps = 512, .envs = 2, .out = dir, .eval_episodes = 1, .max_iterations = 4, .log = &log};
  run_ppo(o);
  EXPECT_KILN_ERROR(run_ppo(o), "holds a previous run");
  o.resume = "latest";
  o.max_iterations = 0;
  o.seed = 3;
  EXPECT_KILN_ERROR(run_ppo(o), "the checkpoint was trained with seed 1, this run asks for 3 (--seed)");
  o.overrides = {"seed"};
  PPOJobResult r = run_ppo(o);
  EXPECT_EQ(r.global_step, 512);
  const json config = json::parse(io::read_checkpoint_info(r.checkpoint).config);
  EXPECT_EQ(config["seed"], 3);
  EXPECT_EQ(config["overrides"][0]["name"], "seed");
  // --overwrite replaces it.
  PPOJobOptions again{.total_steps = 512, .envs = 2, .out = dir, .overwrite = true, .eval_episodes = 1, .log = &log};
  EXPECT_EQ(run_ppo(again).global_step, 512);
  EXPECT_TRUE(aside_folders(dir).empty());
}

TEST(HardenedJobs, OffPolicyRerunNeedsOverwrite) {
  const std::string dir = kiln::testing::fresh_dir();
  std::ostringstream log;
  OffPolicyJobOptions o{.algo = "dqn", .total_steps = 200, .out = dir, .eval_every = 100, .eval_episodes = 1,
                        .log = &log};
  run_offpolicy(o);
  EXPECT_KILN_ERROR(run_offpolicy(o), "holds a previous run");
  o.overwrite = true;
  OffPolicyJobResult r = run_offpolicy(o);
  EXPECT_EQ(r.global_step, 200);
  EXPECT_EQ(int64_t(kiln::testing::read_lines(r.csv).size()), 1 + 2);
  EXPECT_TRUE(aside_folders(dir).empty());
}

TEST(HardenedJobs, GenerateRefusesADivergedCheckpointAndBadOptionsBeforePrinting) {
  const std::string dir = kiln::testing::fresh_dir();
  std::string text;
  while (text.size() < 3000) text += "ROMEO:\nBut soft, what light through yonder window breaks?\n\n";
  kiln::testing::write_bytes(dir + "/text.txt", text);
  std::ostringstream log;
  LmResult r = train_lm({.data = dir + "/text.txt", .n_layer = 1, .n_head = 2, .n_embd = 16, .block_size = 16,
                         .iters = 10, .batch_size = 4, .warmup = 2, .eval_interval = 10, .eval_iters = 1,
                         .out = dir + "/run", .log = &log, .tty = false});
  EXPECT_KILN_ERROR(train_lm({.data = dir + "/text.txt", .out = dir + "/run", .log = &log}), "holds a previous run");
  EXPECT_KILN_ERROR(train_lm({.data = dir, .out = dir + "/other", .log = &log}), "--data " + dir + " is a folder");
  // A device that never ends stops at the limit (it read 23.5 GB before).
  EXPECT_KILN_ERROR(train_lm({.data = "/dev/zero", .out = dir + "/other", .log = &log}),
                    "--data /dev/zero is longer than 268435456 bytes (256 MiB)");
  EXPECT_FALSE(fs::exists(dir + "/other"));

  // The checkpoint with one weight turned NaN, as a diverged run would leave it.
  LanguageModel lm = load_lm(r.checkpoint);
  Tensor w = lm.model->named_parameters().begin()->second.value();
  w.data<float>()[0] = std::nanf("");
  io::Checkpoint nan_ckpt;
  nan_ckpt.model(*lm.model).config(io::read_checkpoint_info(r.checkpoint).config);
  const std::string bad = dir + "/diverged.safetensors";
  nan_ckpt.save(bad);
  EXPECT_KILN_ERROR(load_lm(bad), "holds NaN or infinite values: the run diverged before this checkpoint");
  std::ostringstream out;
  EXPECT_KILN_ERROR(generate_text({.checkpoint = bad, .prompt = "ROMEO", .out = &out}), "holds NaN");
  EXPECT_EQ(out.str(), "");

  // The probe: --temperature nan printed the prompt before failing.
  EXPECT_KILN_ERROR(generate_text({.checkpoint = r.checkpoint, .prompt = "ROMEO", .temperature = std::nan(""),
                                   .out = &out}),
                    "--temperature must be a finite number in [0, inf), got nan");
  EXPECT_KILN_ERROR(generate_text({.checkpoint = r.checkpoint, .prompt = "ROMEO", .top_k = -1, .out = &out}),
                    "--top-k must be non-negative");
  EXPECT_EQ(out.str(), "");
}

}  // namespace
}  // namespace kiln::app
