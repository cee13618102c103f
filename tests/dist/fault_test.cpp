// Faults in a 2-rank run (issue 30): a rank that throws, or one that is
// killed, stops every rank within 10 s with a non-zero exit that names the
// rank (and the cause, when it threw); the checkpoint rank 0 wrote before is
// intact and loadable. Runs `mpirun -np 2 kiln_dist_fault_worker`.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <sys/wait.h>

#include "tests/support/dist_testing.h"

namespace kiln {
namespace {

struct Outcome {
  int exit_code = -1;
  double seconds = 0;
  std::string output;  // stdout and stderr
};

Outcome run_ranks(const std::string& mode, const std::string& dir) {
  const std::string cmd = std::string("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 KILN_NUM_THREADS=1 ") +
                          KILN_MPIEXEC + " -np 2 --oversubscribe --bind-to none " + KILN_DIST_FAULT_WORKER + " " +
                          mode + " " + dir + " 2>&1";
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p = popen(cmd.c_str(), "r");
  Outcome out;
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.output.append(buf, n);
  const int status = pclose(p);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return out;
}

// The checkpoint of step 10 loads into a fresh model and optimizer.
void expect_loadable(const std::string& dir) {
  Rngs rngs{{"params", 1}};
  auto model = nn::make<nn::Sequential>();
  model->push_back(nn::Linear(6, 16, rngs));
  model->push_back(nn::Tanh());
  model->push_back(nn::Linear(16, 3, rngs));
  optim::AdamW opt(model->parameters(), {.lr = 0.01});
  EXPECT_NO_THROW(io::Checkpoint().model(*model).optimizer(opt).load(dir + "/last.safetensors"));
  EXPECT_EQ(opt.step_count(), 10);
}

class Fault : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = (std::filesystem::temp_directory_path() /
           ("kiln_dist_fault_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name()))
              .string();
    std::filesystem::remove_all(dir);
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  std::string dir;
};

TEST_F(Fault, ARankThatThrowsStopsEveryRankNamingRankAndCause) {
  Outcome o = run_ranks("throw", dir);
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_LT(o.seconds, 10.0) << o.output;
  EXPECT_NE(o.output.find("[dist] rank 1 of 2"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("planned failure at step 12"), std::string::npos) << o.output;
  expect_loadable(dir);
}

TEST_F(Fault, AKilledRankStopsEveryRank) {
  Outcome o = run_ranks("kill", dir);
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_LT(o.seconds, 10.0) << o.output;
  // mpirun names the rank that died and how.
  EXPECT_NE(o.output.find("rank 1"), std::string::npos) << o.output;
  expect_loadable(dir);
}

TEST(ProcessGroup, RankAndWorldSizeBeforeInitComeFromTheEnvironment) {
  ASSERT_FALSE(dist::is_initialized());
  ::setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
  EXPECT_EQ(dist::rank(), 3);
  EXPECT_EQ(dist::world_size(), 8);
  ::unsetenv("OMPI_COMM_WORLD_RANK");
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(dist::rank(), 0);
  EXPECT_EQ(dist::world_size(), 1);
  Tensor t = ones({2});
  EXPECT_THROW(dist::all_reduce(t), Error);  // before init
  EXPECT_THROW(dist::barrier(), Error);
}

}  // namespace
}  // namespace kiln
