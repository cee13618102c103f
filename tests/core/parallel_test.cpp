// The thread pool: counts, and parallel_for's coverage and error handling.
#include <algorithm>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <mutex>
#include <string>
#include <thread>

#include "kiln/core/parallel.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

struct ThreadCount {  // restores the thread count at scope exit
  int saved = get_num_threads();
  ~ThreadCount() { set_num_threads(saved); }
};

TEST(Parallel, DefaultIsAvailableCpus) {
  EXPECT_GE(available_cpus(), 1);
  if (!std::getenv("KILN_NUM_THREADS")) {
    EXPECT_EQ(get_num_threads(), available_cpus());
  }
}

TEST(Parallel, SetAndGet) {
  ThreadCount restore;
  set_num_threads(1);
  EXPECT_EQ(get_num_threads(), 1);
  set_num_threads(3);
  EXPECT_EQ(get_num_threads(), std::min(3, available_cpus()));
}

// Issue 23: --threads 100000 (or KILN_NUM_THREADS=100000) segfaulted inside
// OpenMP, 50000 aborted. A count above the CPUs is clamped to them (a notice
// on stderr, once); zero or negative is refused.
TEST(Parallel, CountsAboveTheCpusAreClampedWithOneNotice) {
  ThreadCount restore;
  ::testing::internal::CaptureStderr();
  set_num_threads(100000);
  EXPECT_EQ(get_num_threads(), available_cpus());
  set_num_threads(50000);
  EXPECT_EQ(get_num_threads(), available_cpus());
  set_num_threads(std::numeric_limits<int>::max());
  EXPECT_EQ(get_num_threads(), available_cpus());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_LE(std::count(err.begin(), err.end(), '\n'), 1) << err;  // once per process (maybe printed earlier)
  std::atomic<int64_t> total{0};
  parallel_for(0, 1 << 20, 1, [&](int64_t lo, int64_t hi) { total += hi - lo; });
  EXPECT_EQ(total.load(), 1 << 20);
}

TEST(Parallel, ZeroOrNegativeCountsAreRefused) {
  ThreadCount restore;
  set_num_threads(1);
  EXPECT_KILN_ERROR(set_num_threads(0), "[set_num_threads] the thread count must be at least 1, got 0");
  EXPECT_KILN_ERROR(set_num_threads(-4), "[set_num_threads] the thread count must be at least 1, got -4");
  EXPECT_EQ(get_num_threads(), 1);  // unchanged
}

// Runs this test binary again with KILN_NUM_THREADS=value; returns what
// ParallelEnvChild.ReportsThreadCount printed (stdout and stderr).
std::string run_child_with_env(const std::string& value) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();  // not the shell's
  const std::string cmd = "KILN_PARALLEL_CHILD=1 KILN_NUM_THREADS='" + value + "' '" + self +
                          "' --gtest_filter=ParallelEnvChild.ReportsThreadCount 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return "popen failed";
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  pclose(pipe);
  return out;
}

// Only does something as the child of the test below.
TEST(ParallelEnvChild, ReportsThreadCount) {
  if (std::getenv("KILN_PARALLEL_CHILD")) std::printf("threads=%d cpus=%d\n", get_num_threads(), available_cpus());
}

TEST(Parallel, EnvCountIsClampedAndBadValuesAreIgnoredWithANotice) {
  const int cpus = available_cpus();
  const std::string base = fmt::format("threads={} cpus={}", cpus, cpus);
  std::string out = run_child_with_env("100000");
  EXPECT_NE(out.find(base), std::string::npos) << out;
  EXPECT_NE(out.find("kiln: KILN_NUM_THREADS=100000 is more than the " + std::to_string(cpus)), std::string::npos)
      << out;
  for (const char* bad : {"0", "-3", "abc", "4x", "", "99999999999999999999"}) {
    out = run_child_with_env(bad);
    EXPECT_NE(out.find(base), std::string::npos) << bad << ": " << out;
    EXPECT_NE(out.find(fmt::format("kiln: ignoring KILN_NUM_THREADS='{}': not a whole number of threads >= 1", bad)),
              std::string::npos)
        << bad << ": " << out;
  }
  out = run_child_with_env("1");
  EXPECT_NE(out.find("threads=1 cpus="), std::string::npos) << out;
  EXPECT_EQ(out.find("kiln: "), std::string::npos) << out;
}

TEST(Parallel, CoversTheRangeOnceInChunksOfAtLeastGrain) {
  ThreadCount restore;
  for (int threads : {1, 2, 4}) {
    set_num_threads(threads);
    for (int64_t n : {0, 1, 99, 100, 101, 10007}) {
      std::vector<std::atomic<int>> hits(size_t(n) + 1);
      std::mutex mu;
      std::vector<std::pair<int64_t, int64_t>> chunks;
      parallel_for(1, n + 1, 100, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) hits[size_t(i)]++;
        std::lock_guard<std::mutex> lock(mu);
        chunks.emplace_back(lo, hi);
      });
      for (int64_t i = 1; i <= n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "n " << n << " i " << i;
      EXPECT_EQ(hits[0].load(), 0);
      if (n == 0) {
        EXPECT_TRUE(chunks.empty());
      }
      if (chunks.size() > 1) {
        for (auto [lo, hi] : chunks) EXPECT_GE(hi - lo, 100) << threads << " threads, n " << n;
      }
      EXPECT_LE(int(chunks.size()), threads);
    }
  }
}

// A busy thread pinned to the last CPU, as another process's would be, until
// destroyed.
class BusyNeighbour {
 public:
  BusyNeighbour() : thread_([this] {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(last_cpu(), &set);
      pthread_setaffinity_np(pthread_self(), sizeof set, &set);
      while (!stop_.load(std::memory_order_relaxed)) {
      }
    }) {}
  ~BusyNeighbour() {
    stop_ = true;
    thread_.join();
  }

 private:
  static int last_cpu() {
    cpu_set_t set;
    sched_getaffinity(0, sizeof set, &set);
    int last = 0;
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) last = c;
    return last;
  }
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Regions of ~0.2 ms of work on every thread.
void regions(int count) {
  for (int i = 0; i < count; ++i)
    parallel_for(0, 2, 1, [](int64_t, int64_t) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
      while (std::chrono::steady_clock::now() < until) {
      }
    });
}

TEST(Parallel, DefaultPoolDropsToOneThreadWhileABusyNeighbourHoldsItsThreadsUp) {
  if (available_cpus() < 2) GTEST_SKIP() << "needs 2 CPUs";
  ThreadCount restore;
  use_default_threads();
  ASSERT_EQ(effective_num_threads(), get_num_threads());
  const int64_t before = contention_episodes();
  {
    BusyNeighbour neighbour;
    for (int i = 0; i < 200 && effective_num_threads() > 1; ++i) regions(32);
    EXPECT_EQ(effective_num_threads(), 1);
    EXPECT_GT(contention_episodes(), before);
    EXPECT_GT(get_num_threads(), 1) << "the configured count is unchanged";
  }
  // After the back-off (100 ms for a first episode, at most 3.2 s) all threads again.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (effective_num_threads() == 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(effective_num_threads(), get_num_threads());
  // An explicit count is kept whatever the regions look like.
  set_num_threads(2);
  const int64_t episodes = contention_episodes();
  {
    BusyNeighbour neighbour;
    regions(200);
  }
  EXPECT_EQ(effective_num_threads(), 2);
  EXPECT_EQ(contention_episodes(), episodes);
}

TEST(Parallel, ErrorsInWorkersPropagate) {
  ThreadCount restore;
  set_num_threads(2);
  EXPECT_KILN_ERROR(parallel_for(0, 1 << 20, 1, [](int64_t lo, int64_t) {
                      KILN_CHECK(lo == 0, "worker", "chunk at {} failed", lo);
                    }),
                    "[worker] chunk at");
}

TEST(Parallel, NestedLoopsRunInline) {
  ThreadCount restore;
  set_num_threads(2);
  std::atomic<int64_t> total{0};
  parallel_for(0, 2, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      int calls = 0;
      parallel_for(0, 1000, 1, [&](int64_t a, int64_t b) {
        ++calls;  // not atomic: a nested loop must stay on this thread
        total += b - a;
      });
      EXPECT_EQ(calls, 1);
    }
  });
  EXPECT_EQ(total.load(), 2000);
}

}  // namespace
}  // namespace kiln
