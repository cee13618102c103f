// The thread pool: counts, and parallel_for's coverage and error handling.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>

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
  EXPECT_EQ(get_num_threads(), 3);
  set_num_threads(0);  // clamped to one thread
  EXPECT_EQ(get_num_threads(), 1);
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

TEST(Parallel, DefaultPoolDropsToOneThreadWhileAThreadIsHeldUp) {
  // A worker held up inside its chunk, as one descheduled by a busy neighbour
  // process would be, makes the other wait at every join (NOTE [Contention]).
  if (available_cpus() < 2) GTEST_SKIP() << "needs 2 CPUs";
  ThreadCount restore;
  use_default_threads();
  ASSERT_EQ(effective_num_threads(), get_num_threads());
  const int64_t before = contention_episodes();
  for (int i = 0; i < 200 && effective_num_threads() > 1; ++i)
    parallel_for(0, 2, 1, [](int64_t lo, int64_t) {
      if (lo == 1) std::this_thread::sleep_for(std::chrono::microseconds(500));
    });
  EXPECT_EQ(effective_num_threads(), 1);
  EXPECT_EQ(contention_episodes(), before + 1);
  EXPECT_GT(get_num_threads(), 1) << "the configured count is unchanged";
  // After the back-off (100 ms for a first episode, at most 3.2 s) all threads again.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (effective_num_threads() == 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(effective_num_threads(), get_num_threads());
  // An explicit count is kept whatever the regions look like.
  set_num_threads(2);
  for (int i = 0; i < 100; ++i)
    parallel_for(0, 2, 1, [](int64_t lo, int64_t) {
      if (lo == 1) std::this_thread::sleep_for(std::chrono::microseconds(500));
    });
  EXPECT_EQ(effective_num_threads(), 2);
  EXPECT_EQ(contention_episodes(), before + 1);
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
