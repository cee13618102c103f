// The kiln tool as a user meets it (issue 23, items 3, 7, 10): every failure
// is one `kiln: error: ...` line and a non-zero status, never an abort (134);
// numbers out of range are refused naming the flag and the range; a thread
// count above the CPUs is clamped with a notice; SIGINT/SIGTERM end a run
// after the step with a checkpoint (130/143); a second live run into the same
// folder is refused.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "apps/kiln/lm.h"
#include "kiln/data/tokenizer.h"
#include "kiln/io/checkpoint.h"
#include "kiln/io/checkpoint_manager.h"
#include "tests/apps/cli_runner.h"
#include "tests/support/apps_testing.h"

namespace kiln::app {
namespace {

namespace fs = std::filesystem;
using kiln::testing::run_cli;

// stderr is exactly one line: "kiln: error: ..." containing `what`.
void expect_one_line_error(const kiln::testing::CliResult& r, const std::string& what) {
  EXPECT_EQ(r.err.rfind("kiln: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(what), std::string::npos) << r.err << "\nexpected to contain: " << what;
}

// A text of `bytes` characters for `kiln train lm`.
std::string write_text(const std::string& dir, size_t bytes) {
  std::string text;
  while (text.size() < bytes) text += "ROMEO:\nBut soft, what light through yonder window breaks?\n\n";
  text.resize(bytes);
  kiln::testing::write_bytes(dir + "/text.txt", text);
  return dir + "/text.txt";
}

TEST(Cli, NumbersOutOfRangeAreRefusedInOneLine) {
  const std::string dir = kiln::testing::fresh_dir();
  const std::vector<std::pair<std::vector<std::string>, std::string>> probes = {
      {{"train", "fashion-mnist", "--seed", "-1"}, "--seed must be a whole number in [0, 18446744073709551615], got '-1'"},
      {{"train", "fashion-mnist", "--epochs", "abc"}, "--epochs must be a whole number in [1, 1000000], got 'abc'"},
      {{"train", "fashion-mnist", "--epochs", "1e20"}, "--epochs must be a whole number in [1, 1000000], got '1e20'"},
      {{"train", "fashion-mnist", "--batch-size", "4611686018427387904"},
       "--batch-size must be a whole number in [1, 2147483647], got '4611686018427387904'"},
      {{"train", "fashion-mnist", "--lr", "nan"}, "--lr must be a finite number in (0, inf), got 'nan'"},
      {{"train", "fashion-mnist", "--threads", "0"}, "--threads must be a whole number in [1, 1048576], got '0'"},
      {{"train", "lm", "--data", "x", "--iters", "4e18"}, "--iters must be a whole number in [1, 1000000000], got '4e18'"},
      {{"train", "lm", "--data", "x", "--dropout", "1"}, "--dropout must be a finite number in [0, 1), got '1'"},
      {{"rl", "ppo", "cartpole", "--seed", "3.5"}, "--seed must be a whole number in [0, 18446744073709551615], got '3.5'"},
      {{"rl", "dqn", "cartpole", "--total-steps", "-5"}, "--total-steps must be a whole number in [1, 1000000000000]"},
      {{"generate", "--checkpoint", "x", "--temperature", "nan"},
       "--temperature must be a finite number in [0, inf), got 'nan'"},
      {{"generate", "--checkpoint", "x", "--top-p", "0"}, "--top-p must be a finite number in (0, 1], got '0'"},
      {{"train", "fashion-mnist", "--no-such-flag"}, "--no-such-flag"},
  };
  for (const auto& [args, what] : probes) {
    kiln::testing::CliResult r = run_cli(args, dir);
    EXPECT_EQ(r.status, 2) << args[args.size() - 2] << " " << args.back();
    expect_one_line_error(r, what);
    EXPECT_EQ(r.out, "");
  }
}

TEST(Cli, ThreadsAboveTheCpusAreClampedWithANotice) {
  const std::string dir = kiln::testing::fresh_dir();
  kiln::testing::CliResult r = run_cli({"generate", "--checkpoint", dir + "/none", "--threads", "100000"}, dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(fmt::format("kiln: --threads 100000 is more than the {} CPU", kiln::available_cpus())),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("kiln: error: [load_lm] " + dir + "/none: no such file or folder"), std::string::npos) << r.err;
}

TEST(Cli, BadOutFoldersAreOneLineErrors) {
  const std::string dir = kiln::testing::fresh_dir();
  kiln::testing::write_bytes(dir + "/file", "x");
  const std::vector<std::string> dqn = {"rl", "dqn", "cartpole", "--total-steps", "100", "--eval-every", "100",
                                        "--eval-episodes", "1"};
  auto with_out = [&](const std::string& out) {
    std::vector<std::string> args = dqn;
    args.insert(args.end(), {"--out", out});
    return args;
  };
  kiln::testing::CliResult r = run_cli(with_out(dir + "/file"), dir);
  EXPECT_EQ(r.status, 1);
  expect_one_line_error(r, "--out " + dir + "/file is a file, not a folder");
  r = run_cli(with_out(""), dir);
  EXPECT_EQ(r.status, 1);
  expect_one_line_error(r, "--out must name a folder, got ''");
  r = run_cli(with_out(dir + "/file/run"), dir);
  EXPECT_EQ(r.status, 1);
  expect_one_line_error(r, "cannot create the --out folder " + dir + "/file/run");
  // A finished run is not replaced without --overwrite.
  r = run_cli(with_out(dir + "/run"), dir);
  ASSERT_EQ(r.status, 0) << r.err;
  r = run_cli(with_out(dir + "/run"), dir);
  EXPECT_EQ(r.status, 1);
  expect_one_line_error(r, "holds a previous run");
}

TEST(Cli, LmBatchTooLargeForMemoryIsRefused) {
  const std::string dir = kiln::testing::fresh_dir();
  kiln::testing::CliResult r =
      run_cli({"train", "lm", "--data", write_text(dir, 2000), "--batch-size", "1000000000", "--out", dir + "/run"}, dir);
  EXPECT_EQ(r.status, 1);
  expect_one_line_error(r, "--batch-size 1000000000 x --block-size 64 is more than 4194304 tokens per step");
  EXPECT_FALSE(fs::exists(dir + "/run"));
}

// A checkpoint of `kiln train lm` whose config asks for a model far beyond
// memory: refused before anything is allocated.
TEST(Cli, GenerateRefusesAnOversizedModelConfig) {
  const std::string dir = kiln::testing::fresh_dir();
  auto tok = data::train_tokenizer("char", "abc de", {});
  for (const auto& [edit, what] : std::vector<std::pair<std::pair<const char*, int64_t>, std::string>>{
           {{"n_embd", 1'000'000'000}, "n_embd 1000000000"},
           {{"n_layer", 1000}, "more than 2^31"}}) {
    models::GPTConfig config{.vocab_size = tok->vocab_size(), .n_embd = 65536};
    nlohmann::json model = nlohmann::json::parse(config.to_json());
    if (std::string(edit.first) == "n_layer") model["n_embd"] = 4096;
    model[edit.first] = edit.second;
    io::Checkpoint ckpt;
    ckpt.config(nlohmann::json{{"job", "lm"}, {"model", model}, {"tokenizer", tok->to_json()}}.dump());
    const std::string path = dir + "/huge.safetensors";
    ckpt.save(path);
    EXPECT_KILN_ERROR(load_lm(path), what);
    kiln::testing::CliResult r = run_cli({"generate", "--checkpoint", path, "--prompt", "a"}, dir);
    EXPECT_EQ(r.status, 1) << r.err;
    expect_one_line_error(r, what);
    EXPECT_EQ(r.out, "");  // nothing printed before the error
  }
}

// The run of the signal tests: a tiny GPT for far more steps than the test waits.
std::vector<std::string> long_lm_run(const std::string& text, const std::string& out) {
  return {"train", "lm", "--data", text, "--out", out, "--iters", "1000000", "--n-layer", "1", "--n-head", "2",
          "--n-embd", "16", "--block-size", "16", "--batch-size", "4", "--eval-interval", "100000000",
          "--eval-iters", "1", "--threads", "1"};
}

// Training has gone on for a while: the CSV's first buffer reached the disk.
bool trained_a_while(const std::string& out) {
  std::error_code ec;
  return fs::file_size(out + "/metrics.csv", ec) > 0 && !ec;
}

TEST(Cli, SigintFinishesTheStepSavesAndExits130) {
  const std::string dir = kiln::testing::fresh_dir();
  const std::string text = write_text(dir, 4000), out = dir + "/run";
  kiln::testing::CliProcess p = kiln::testing::start_cli(long_lm_run(text, out), dir, "first");
  ASSERT_TRUE(kiln::testing::wait_until([&] { return trained_a_while(out); }, 120)) << p.err();

  // While it runs, a second run into its folder is refused.
  std::vector<std::string> second = long_lm_run(text, out);
  second.push_back("--overwrite");
  kiln::testing::CliResult r = run_cli(second, dir);
  EXPECT_EQ(r.status, 1);
  expect_one_line_error(r, fmt::format("--out {} is in use by another kiln run (pid {})", out, p.pid));

  kill(p.pid, SIGINT);
  EXPECT_EQ(p.wait(), 130) << p.err();
  EXPECT_NE(p.err().find("kiln: signal received: finishing the step and saving a checkpoint"), std::string::npos)
      << p.err();
  io::CheckpointManager manager(out + "/checkpoints");
  ASSERT_TRUE(manager.latest().has_value());
  const int64_t step = io::read_checkpoint_info(*manager.latest()).progress.global_step;
  EXPECT_GT(step, 0);
  EXPECT_NE(p.out().find(fmt::format("stopped by SIGINT at step {}: resume with --resume", step)), std::string::npos)
      << p.out();
  EXPECT_EQ(int64_t(kiln::testing::read_lines(out + "/metrics.csv").size()), 1 + step);  // the log matches

  // It resumes from there; SIGTERM ends the resumed run the same way (143).
  std::vector<std::string> resume = long_lm_run(text, out);
  resume.push_back("--resume");
  kiln::testing::CliProcess q = kiln::testing::start_cli(resume, dir, "resumed");
  ASSERT_TRUE(kiln::testing::wait_until(
      [&] { return int64_t(kiln::testing::read_lines(out + "/metrics.csv").size()) > 1 + step + 100; }, 120))
      << q.err();
  kill(q.pid, SIGTERM);
  EXPECT_EQ(q.wait(), 143) << q.err();
  EXPECT_NE(q.out().find("resuming from " + *manager.latest()), std::string::npos) << q.out();
  io::CheckpointManager after(out + "/checkpoints");
  EXPECT_GT(io::read_checkpoint_info(*after.latest()).progress.global_step, step);
}

TEST(Cli, ASecondSignalExitsAtOnce) {
  const std::string dir = kiln::testing::fresh_dir();
  const std::string text = write_text(dir, 4000), out = dir + "/run";
  kiln::testing::CliProcess p = kiln::testing::start_cli(long_lm_run(text, out), dir);
  ASSERT_TRUE(kiln::testing::wait_until([&] { return trained_a_while(out); }, 120)) << p.err();
  kill(p.pid, SIGTERM);
  // The second signal once the first has been seen (its message written).
  ASSERT_TRUE(kiln::testing::wait_until([&] { return p.err().find("signal received") != std::string::npos; }, 10));
  kill(p.pid, SIGTERM);
  EXPECT_EQ(p.wait(), 143) << p.err();
}

TEST(Cli, RlJobsStopOnASignalWithACheckpoint) {
  const std::string dir = kiln::testing::fresh_dir();
  // PPO: after the iteration in progress.
  const std::string ppo_out = dir + "/ppo";
  kiln::testing::CliProcess ppo = kiln::testing::start_cli(
      {"rl", "ppo", "cartpole", "--total-steps", "100000000", "--eval-every", "0", "--out", ppo_out}, dir, "ppo");
  // Its stdout (a file, so block-buffered) reaches the disk after a few dozen iterations.
  ASSERT_TRUE(kiln::testing::wait_until([&] { return !ppo.out().empty(); }, 120)) << ppo.err();
  kill(ppo.pid, SIGTERM);
  EXPECT_EQ(ppo.wait(), 143) << ppo.err();
  io::CheckpointManager ppo_ckpts(ppo_out + "/checkpoints");
  ASSERT_TRUE(ppo_ckpts.latest().has_value());
  EXPECT_NE(ppo.out().find("stopped by SIGTERM at iteration"), std::string::npos) << ppo.out();

  // DQN: within 250 environment steps, between two evaluations.
  const std::string dqn_out = dir + "/dqn";
  kiln::testing::CliProcess dqn = kiln::testing::start_cli(
      {"rl", "dqn", "cartpole", "--total-steps", "100000000", "--eval-every", "1000000", "--eval-episodes", "1",
       "--out", dqn_out},
      dir, "dqn");
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  kill(dqn.pid, SIGINT);
  EXPECT_EQ(dqn.wait(), 130) << dqn.err();
  io::CheckpointManager dqn_ckpts(dqn_out + "/checkpoints");
  ASSERT_TRUE(dqn_ckpts.latest().has_value());
  EXPECT_EQ(dqn_ckpts.entries().back().step % 250, 0);
  EXPECT_NE(dqn.out().find("stopped by SIGINT at step"), std::string::npos) << dqn.out();
}

}  // namespace
}  // namespace kiln::app
