// The OpenMP-backed pool: one thread count for kiln's loops and oneDNN.
#include "kiln/core/parallel.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
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
  omp_set_num_threads(n);  // the calling thread's count, which oneDNN reads
}

int get_num_threads() { return thread_count().load(std::memory_order_relaxed); }

namespace detail {

bool in_parallel_region() { return omp_in_parallel(); }

void parallel_run(int64_t begin, int64_t end, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn) {
  int64_t len = end - begin;
  int64_t max_chunks = std::max<int64_t>(1, len / std::max<int64_t>(grain, 1));
  int nt = int(std::min<int64_t>(get_num_threads(), max_chunks));
  std::exception_ptr error;
  std::atomic<bool> failed{false};
#pragma omp parallel num_threads(nt)
  {
    int64_t n = omp_get_num_threads(), tid = omp_get_thread_num();
    int64_t chunk = (len + n - 1) / n;
    int64_t lo = begin + tid * chunk, hi = std::min(end, lo + chunk);
    if (lo < hi) {
      try {
        fn(lo, hi);
      } catch (...) {
        if (!failed.exchange(true)) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace detail

}  // namespace kiln
