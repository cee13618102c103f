// NOTE [Progress policy] (kiln/dist/data_parallel.h): DataParallel reduces on a
// communication thread only where the thread has a core that no training
// thread uses; otherwise the gradient hooks progress the reductions.
#include <gtest/gtest.h>

#include "tests/support/dist_testing.h"

namespace kiln {
namespace {

TEST(ProgressPolicy, ThisMachineTwoRanksOfOneThreadOnTwoCoresUseTheHooks) {
  // bench/run ddp_cnn_b64: mpirun -np 2 --bind-to none, KILN_NUM_THREADS=1, 2 cores.
  EXPECT_FALSE(dist::comm_thread_has_a_core(2, 1, 2, 2));
  // The same ranks with kiln's default thread count (every CPU): no idle core either.
  EXPECT_FALSE(dist::comm_thread_has_a_core(2, 2, 2, 2));
  // mpirun's default binding for 2 ranks: one core each.
  EXPECT_FALSE(dist::comm_thread_has_a_core(2, 1, 1, 2));
}

TEST(ProgressPolicy, AnIdleCoreGetsTheThread) {
  EXPECT_TRUE(dist::comm_thread_has_a_core(1, 1, 2, 2));   // one rank of one thread on two cores
  EXPECT_TRUE(dist::comm_thread_has_a_core(2, 1, 4, 4));   // two unbound ranks on four cores
  EXPECT_TRUE(dist::comm_thread_has_a_core(2, 3, 8, 8));   // 6 threads on 8 cores
  EXPECT_TRUE(dist::comm_thread_has_a_core(4, 1, 2, 8));   // bound to two cores each, one thread
}

TEST(ProgressPolicy, EveryCoreBusyGetsTheHooks) {
  EXPECT_FALSE(dist::comm_thread_has_a_core(2, 2, 4, 4));  // 4 threads fill 4 cores
  EXPECT_FALSE(dist::comm_thread_has_a_core(4, 2, 8, 8));
  EXPECT_FALSE(dist::comm_thread_has_a_core(3, 1, 2, 2));  // oversubscribed
  EXPECT_FALSE(dist::comm_thread_has_a_core(4, 2, 2, 8));  // bound to two cores each, both busy
  // A CPU quota (rank_cpus below the machine's) shared by unbound ranks: the
  // ranks fill the machine count they were given.
  EXPECT_FALSE(dist::comm_thread_has_a_core(2, 1, 1, 4));
}

TEST(ProgressPolicy, CountsBelowOneAreErrors) {
  try {
    dist::comm_thread_has_a_core(0, 1, 2, 2);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("comm_thread_has_a_core"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("local_ranks 0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dist::comm_thread_has_a_core(1, 0, 2, 2), Error);
  EXPECT_THROW(dist::comm_thread_has_a_core(1, 1, 0, 2), Error);
  EXPECT_THROW(dist::comm_thread_has_a_core(1, 1, 2, -1), Error);
}

}  // namespace
}  // namespace kiln
