// The OpenMP-backed pool: one thread count for kiln's loops and oneDNN.
#include "kiln/core/parallel.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <mutex>
#include <string>

#include "kiln/core/error.h"
#include "kiln/core/replay.h"

namespace kiln {

namespace {

// cgroup v2 "cpu.max" ("max 100000" or "150000 100000"), else v1 quota/period.
int cgroup_cpu_limit() {
  std::ifstream v2("/sys/fs/cgroup/cpu.max");
  std::string quota;
  long long period = 0;
  if (v2 >> quota >> period) {
    if (quota != "max" && period > 0) return int((std::stoll(quota) + period - 1) / period);
    return 0;
  }
  long long q = -1, p = 0;
  std::ifstream fq("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), fp("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  if ((fq >> q) && (fp >> p) && q > 0 && p > 0) return int((q + p - 1) / p);
  return 0;
}

// KILN_NUM_THREADS when it is a whole number >= 1, at most available_cpus();
// anything else is ignored. Either way with one line on stderr.
int initial_threads() {
  const int cpus = available_cpus();
  const char* env = std::getenv("KILN_NUM_THREADS");
  if (!env) return cpus;
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(env, &end, 10);
  if (end == env || *end != '\0' || errno == ERANGE || n < 1) {
    std::fprintf(stderr, "kiln: ignoring KILN_NUM_THREADS='%s': not a whole number of threads >= 1; using %d\n", env,
                 cpus);
    return cpus;
  }
  if (n > cpus) {
    std::fprintf(stderr, "kiln: KILN_NUM_THREADS=%lld is more than the %d CPUs this process may use; using %d\n", n,
                 cpus, cpus);
    return cpus;
  }
  return int(n);
}

std::atomic<int>& thread_count() {
  static std::atomic<int> n{initial_threads()};
  return n;
}

// NOTE [Contention]: a fork-join region ends when its slowest thread does. On
// idle cores libgomp's spinning hand-offs make two threads the fastest choice;
// when another busy process shares the cores, a descheduled thread holds up
// every region for a scheduler time slice (milliseconds) and a 2-thread step
// runs at a third of its quiet speed, slower than one thread (issue 22). The
// wait policy cannot be changed after libgomp has started, so kiln watches its
// own regions instead: each worker notes how late it started its chunk after
// the fork. A spinning worker starts within microseconds and one woken from
// sleep within ~0.1 ms; only a worker that was runnable but not running (its
// core given to another process) starts later than kLate. When over a window
// of regions (>= 32 and >= 4 ms) such late starts add up to more than a fifth
// of the regions' time, the pool runs on one thread (kiln's loops and oneDNN
// alike) for a back-off period, then tries all threads again; the back-off
// doubles, up to 3.2 s, while the contention lasts. Late starts, not unequal
// finishes, are the signal: uneven work (causal attention's tasks) makes
// threads wait at the join on an idle machine too.
//
// Only the default count adapts: set_num_threads(n) or KILN_NUM_THREADS=n
// means exactly n threads. kiln's own kernels give identical results for any
// thread count; oneDNN's may differ in the last bits (its reductions split by
// thread), so a run that must repeat bit for bit under varying load sets its
// count explicitly.
// A duration in steady_clock ticks.
template <class D>
constexpr int64_t ticks(D d) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(d).count();
}

class ContentionMonitor {
 public:
  using Clock = std::chrono::steady_clock;

  bool contended() {
    if (!contended_.load(std::memory_order_relaxed)) return false;
    if (Clock::now().time_since_epoch().count() < until_.load(std::memory_order_relaxed)) return true;
    contended_.store(false, std::memory_order_relaxed);  // back-off over: probe all threads again
    return false;
  }

  // One region: `late`, its latest worker's start after the fork, and `span`,
  // its wall time (Clock ticks).
  void record(int64_t late, int64_t span) {
    std::lock_guard<std::mutex> lock(mu_);
    if (late > kLate) late_ += late;
    total_ += span;
    if (++regions_ < kWindowRegions || total_ < kWindowTicks) return;
    const bool busy_neighbour = 5 * late_ > total_;
    regions_ = 0, late_ = 0, total_ = 0;
    if (!busy_neighbour) {
      backoff_ = kMinBackoff;
      return;
    }
    until_.store(Clock::now().time_since_epoch().count() + backoff_, std::memory_order_relaxed);
    contended_.store(true, std::memory_order_relaxed);
    ++episodes_;
    backoff_ = std::min(2 * backoff_, kMaxBackoff);
  }

  int64_t episodes() {
    std::lock_guard<std::mutex> lock(mu_);
    return episodes_;
  }

 private:
  static constexpr int64_t kWindowRegions = 32;
  static constexpr int64_t kLate = ticks(std::chrono::microseconds(300));
  static constexpr int64_t kWindowTicks = ticks(std::chrono::milliseconds(4));
  static constexpr int64_t kMinBackoff = ticks(std::chrono::milliseconds(100));
  static constexpr int64_t kMaxBackoff = 32 * kMinBackoff;

  std::atomic<bool> contended_{false};
  std::atomic<int64_t> until_{0};
  std::mutex mu_;
  int64_t regions_ = 0, late_ = 0, total_ = 0, episodes_ = 0;
  int64_t backoff_ = kMinBackoff;
};

ContentionMonitor& monitor() {
  static ContentionMonitor m;
  return m;
}

// True while the count is the default (NOTE [Contention]).
std::atomic<bool>& adaptive() {
  static std::atomic<bool> a{std::getenv("KILN_NUM_THREADS") == nullptr};
  return a;
}

}  // namespace

int available_cpus() {
  int n = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
  if (n <= 0) n = omp_get_num_procs();
  int quota = cgroup_cpu_limit();
  if (quota > 0) n = std::min(n, quota);
  return std::max(n, 1);
}

void set_num_threads(int n) {
  KILN_CHECK(n >= 1, "set_num_threads", "the thread count must be at least 1, got {}", n);
  // More threads than CPUs only adds contention, and very many crash OpenMP.
  if (const int cpus = available_cpus(); n > cpus) {
    static std::atomic<bool> told{false};
    if (!told.exchange(true))
      std::fprintf(stderr, "kiln: %d threads is more than the %d CPUs this process may use; using %d\n", n, cpus, cpus);
    n = cpus;
  }
  thread_count().store(n, std::memory_order_relaxed);
  adaptive().store(false, std::memory_order_relaxed);
  omp_set_num_threads(n);  // the calling thread's count, which oneDNN reads
}

int get_num_threads() { return thread_count().load(std::memory_order_relaxed); }

int effective_num_threads() {
  const int n = get_num_threads();
  if (n == 1 || !adaptive().load(std::memory_order_relaxed)) return n;
  return monitor().contended() ? 1 : n;
}

int64_t contention_episodes() { return monitor().episodes(); }

void use_default_threads() {
  const int n = available_cpus();
  thread_count().store(n, std::memory_order_relaxed);
  adaptive().store(true, std::memory_order_relaxed);
  omp_set_num_threads(n);
}

namespace detail {

bool in_parallel_region() { return omp_in_parallel(); }

void parallel_run(int64_t begin, int64_t end, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn) {
  int64_t len = end - begin;
  int64_t max_chunks = std::max<int64_t>(1, len / std::max<int64_t>(grain, 1));
  int nt = int(std::min<int64_t>(effective_num_threads(), max_chunks));
  if (nt == 1) {
    fn(begin, end);
    return;
  }
  using Clock = ContentionMonitor::Clock;
  // While a step is recorded (kiln/core/replay.h), the workers report the
  // tensor memory they reach to the same recording, as the caller's thread
  // does: the passes' lifetimes must see every access (replay.cpp locks).
  const replay::detail::ThreadState caller = replay::detail::state();
  struct Recording {
    explicit Recording(const replay::detail::ThreadState& c, bool worker) : on(worker && c.rec) {
      if (on) replay::detail::state() = c;
    }
    ~Recording() {
      if (on) replay::detail::state() = {};
    }
    bool on;
  };
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  std::atomic<int64_t> late{0};
  const auto t0 = Clock::now();
#pragma omp parallel num_threads(nt)
  {
    const int64_t started = (Clock::now() - t0).count();
    int64_t n = omp_get_num_threads(), tid = omp_get_thread_num();
    if (tid > 0) {
      int64_t seen = late.load(std::memory_order_relaxed);
      while (started > seen && !late.compare_exchange_weak(seen, started, std::memory_order_relaxed)) {
      }
    }
    int64_t chunk = (len + n - 1) / n;
    int64_t lo = begin + tid * chunk, hi = std::min(end, lo + chunk);
    if (lo < hi) {
      Recording recording(caller, tid > 0);
      try {
        fn(lo, hi);
      } catch (...) {
        if (!failed.exchange(true)) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
  if (adaptive().load(std::memory_order_relaxed))
    monitor().record(late.load(std::memory_order_relaxed), (Clock::now() - t0).count());
}

}  // namespace detail

}  // namespace kiln
