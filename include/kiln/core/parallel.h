// The intra-op thread pool (OpenMP, the runtime oneDNN uses too, so there is
// one pool and the cores are never oversubscribed).
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace kiln {

/// Threads used by kiln's loops and by oneDNN. Default: the CPUs this process
/// may use (affinity mask and cgroup CPU quota respected).
void set_num_threads(int n);
int get_num_threads();
/// The default count described above.
int available_cpus();

/// The threads the next parallel loop or oneDNN primitive will use: the count
/// above, or 1 while other busy processes share the cores and the count is
/// the default one (NOTE [Contention] in src/core/parallel.cpp; an explicit
/// set_num_threads or KILN_NUM_THREADS turns the adaptation off). Kernels
/// that split work by thread ask this, not get_num_threads().
int effective_num_threads();
/// How often the default pool has dropped to one thread for contention.
int64_t contention_episodes();
/// Back to the default count (available_cpus(), adapting to contention), as
/// if set_num_threads had never been called.
void use_default_threads();

namespace detail {
/// A non-owning callable reference (the callee outlives the call).
template <class Sig> class FunctionRef;
template <class R, class... A>
class FunctionRef<R(A...)> {
 public:
  template <class F>
  FunctionRef(F& f) : obj_(&f), call_([](void* o, A... a) -> R { return (*static_cast<F*>(o))(a...); }) {}  // NOLINT
  R operator()(A... a) const { return call_(obj_, a...); }

 private:
  void* obj_;
  R (*call_)(void*, A...);
};

void parallel_run(int64_t begin, int64_t end, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn);
bool in_parallel_region();
}  // namespace detail

/// Runs fn(lo, hi) over disjoint chunks covering [begin, end), in parallel
/// when there is more than `grain` work. Chunks are contiguous and at least
/// `grain` long; results must not depend on how the range is split.
template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, F&& fn) {
  if (end <= begin) return;
  if (end - begin <= grain || get_num_threads() == 1 || detail::in_parallel_region()) {
    fn(begin, end);
    return;
  }
  detail::parallel_run(begin, end, grain, detail::FunctionRef<void(int64_t, int64_t)>(fn));
}

}  // namespace kiln
