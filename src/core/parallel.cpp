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
// own regions instead: each thread notes when it started and finished its
// chunk, and the time threads spent waiting for each other (late starts, early
// finishes) is summed over a window of regions. When the waiting exceeds a
// quarter of the threads' time, the pool runs on one thread (kiln's loops and
// oneDNN alike) for a back-off period, then tries all threads again; the
// back-off doubles, up to 3.2 s, while the contention lasts. Quiet regions
// wait ~1-5 % of their time; contended ones 30-50 %.
//
// Only the default count adapts: set_num_threads(n) or KILN_NUM_THREADS=n
// means exactly n threads. kiln's own kernels give identical results for any
// thread count; oneDNN's may differ in the last bits (its reductions split by
// thread), so a run that must repeat bit for bit under varying load sets its
// count explicitly.
class ContentionMonitor {
 public:
  using Clock = std::chrono::steady_clock;

  bool contended() {
    if (!contended_.load(std::memory_order_relaxed)) return false;
    if (Clock::now().time_since_epoch().count() < until_.load(std::memory_order_relaxed)) return true;
    contended_.store(false, std::memory_order_relaxed);  // back-off over: probe all threads again
    return false;
  }

  // One region of n working threads: busy is their summed time in their
  // chunks (each scaled to a full-size chunk, so a short last chunk is not
  // taken for waiting), span the region's wall time; both in Clock ticks.
  void record(int n, int64_t busy, int64_t span) {
    std::lock_guard<std::mutex> lock(mu_);
    waited_ += std::max<int64_t>(0, n * span - busy);
    total_ += n * span;
    if (++regions_ < kWindowRegions || total_ < kWindowTicks) return;
    const bool busy_neighbour = 4 * waited_ > total_;
    regions_ = 0, waited_ = 0, total_ = 0;
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
  static constexpr int64_t kWindowTicks = std::chrono::duration_cast<Clock::duration>(std::chrono::milliseconds(4)).count();
  static constexpr int64_t kMinBackoff = std::chrono::duration_cast<Clock::duration>(std::chrono::milliseconds(100)).count();
  static constexpr int64_t kMaxBackoff = 32 * kMinBackoff;

  std::atomic<bool> contended_{false};
  std::atomic<int64_t> until_{0};
  std::mutex mu_;
  int64_t regions_ = 0, waited_ = 0, total_ = 0, episodes_ = 0;
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
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  std::atomic<int64_t> busy{0};
  std::atomic<int> working{0};
  const auto t0 = Clock::now();
#pragma omp parallel num_threads(nt)
  {
    const auto start = Clock::now();
    int64_t n = omp_get_num_threads(), tid = omp_get_thread_num();
    int64_t chunk = (len + n - 1) / n;
    int64_t lo = begin + tid * chunk, hi = std::min(end, lo + chunk);
    if (lo < hi) {
      try {
        fn(lo, hi);
      } catch (...) {
        if (!failed.exchange(true)) error = std::current_exception();
      }
      const int64_t took = (Clock::now() - start).count();
      busy.fetch_add(hi - lo == chunk ? took : int64_t(double(took) * double(chunk) / double(hi - lo)),
                     std::memory_order_relaxed);
      working.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (error) std::rethrow_exception(error);
  const int team = working.load(std::memory_order_relaxed);
  if (team > 1 && adaptive().load(std::memory_order_relaxed))
    monitor().record(team, busy.load(std::memory_order_relaxed), (Clock::now() - t0).count());
}

}  // namespace detail

}  // namespace kiln
