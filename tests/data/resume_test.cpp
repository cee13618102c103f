// I3, the acceptance test of checkpoints: training 2N steps straight equals
// training N, saving, loading in a fresh process and training N more, bit for
// bit: the loss sequence, every parameter, every optimizer moment and step,
// and every random state (dropout's generator, the Rngs streams, the
// sampler's order and cursor), for 1 and 2 threads. The legs run in
// tests/data/resume_worker.cpp.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "kiln/io/checkpoint.h"
#include "kiln/io/safetensors.h"
#include "tests/support/data_testing.h"

namespace kiln::io {
namespace {
using testing::equal;

/// Runs the worker with `args`; its exit status.
int run_worker(std::vector<std::string> args) {
  args.insert(args.begin(), KILN_RESUME_WORKER);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/// Every tensor bit for bit, in the same order.
void expect_identical(const nn::StateDict& a, const nn::StateDict& b) {
  ASSERT_EQ(a.keys(), b.keys());
  for (const auto& [key, value] : a) EXPECT_TRUE(equal(value, b.at(key))) << key;
}

class Resume : public ::testing::TestWithParam<int> {};

TEST_P(Resume, TrainingNStepsSavingLoadingAndNMoreEqualsTwoNStraightBitForBit) {
  const std::string threads = std::to_string(GetParam());
  const std::string dir = (kiln::testing::scratch_root() / ("kiln_resume_" + threads)).string();
  std::filesystem::create_directories(dir);
  const std::string straight = dir + "/straight.safetensors", first = dir + "/first.safetensors",
                    mid = dir + "/mid.safetensors", resumed = dir + "/resumed.safetensors";
  // 40 samples in batches of 8: step 7 is the 3rd of epoch 2, so the save is mid-epoch.
  ASSERT_EQ(run_worker({"straight", threads, "14", straight}), 0);
  ASSERT_EQ(run_worker({"first", threads, "7", first, mid}), 0);
  ASSERT_EQ(run_worker({"resume", threads, "7", resumed, mid}), 0);

  // The loss sequence: 14 = 7 + 7, bit for bit.
  Tensor all = load_safetensors(straight + ".losses").at("losses");
  Tensor head = load_safetensors(first + ".losses").at("losses");
  Tensor tail = load_safetensors(resumed + ".losses").at("losses");
  ASSERT_EQ(all.numel(), 14);
  EXPECT_TRUE(equal(all.slice(0, 0, 7), head));
  EXPECT_TRUE(equal(all.slice(0, 7, 14), tail));
  // Dropout and noise make the losses differ step to step; training lowers them.
  EXPECT_NE(all[3].item<double>(), all[4].item<double>());

  // Parameters, optimizer state and all random state at the end.
  expect_identical(load_safetensors(straight), load_safetensors(resumed));
  auto meta_straight = read_safetensors_metadata(straight), meta_resumed = read_safetensors_metadata(resumed);
  EXPECT_EQ(meta_straight, meta_resumed);
  EXPECT_NE(meta_straight.at("kiln.generators"), read_safetensors_metadata(mid).at("kiln.generators"));
  CheckpointInfo info = read_checkpoint_info(resumed);
  EXPECT_EQ(info.progress, (Progress{.epoch = 2, .global_step = 14, .step_in_epoch = 4}));
}

INSTANTIATE_TEST_SUITE_P(Threads, Resume, ::testing::Values(1, 2), [](const auto& info) {
  return std::to_string(info.param) + "_threads";
});

}  // namespace
}  // namespace kiln::io
