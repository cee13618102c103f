// dist::DataParallel: bucketed gradient all-reduce launched from
// post-accumulate-grad hooks (NOTE [Gradient buckets] in kiln/dist/data_parallel.h).
#include "kiln/dist/data_parallel.h"

#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "kiln/autograd/hooks.h"
#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/core/parallel.h"
#include "src/dist/mpi_util.h"
#include "src/dist/shared_buckets.h"

namespace kiln::dist {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU seconds of a clock (this thread's, or another thread's).
double cpu_seconds_of(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}
double thread_cpu() { return cpu_seconds_of(CLOCK_THREAD_CPUTIME_ID); }

// Copies `src` (contiguous, numel elements of dtype) to dst bytes.
void copy_out(const Tensor& src, void* dst) { std::memcpy(dst, src.data_ptr(), size_t(src.nbytes())); }

// The CPUs of this machine, which its ranks share (NOTE [Progress
// policy]): the hardware's count, or, when this process may run on all of them
// (not bound to some), what kiln::available_cpus() allows (a cgroup CPU quota
// limits every rank of the container at once).
int machine_cpus() {
  const int hw = int(std::thread::hardware_concurrency());
  cpu_set_t set;
  const int affinity = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : hw;
  if (hw <= 0) return available_cpus();
  return affinity >= hw ? std::min(hw, available_cpus()) : hw;
}

// The ranks of comm on this node (MPI_COMM_TYPE_SHARED).
int local_ranks(MPI_Comm comm) {
  MPI_Comm node = MPI_COMM_NULL;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS || node == MPI_COMM_NULL)
    return world_size();
  int n = 1;
  MPI_Comm_size(node, &n);
  MPI_Comm_free(&node);
  return n;
}

}  // namespace

bool comm_thread_has_a_core(int local_ranks, int threads_per_rank, int rank_cpus, int machine_cpus) {
  KILN_CHECK(local_ranks >= 1 && threads_per_rank >= 1 && rank_cpus >= 1 && machine_cpus >= 1,
             "dist.comm_thread_has_a_core",
             "every count must be at least 1, got local_ranks {}, threads_per_rank {}, rank_cpus {}, machine_cpus {}",
             local_ranks, threads_per_rank, rank_cpus, machine_cpus);
  // Unbound ranks (rank_cpus = machine_cpus) share the machine: the first
  // test decides. Ranks bound to disjoint sets of CPUs: local_ranks x
  // rank_cpus <= machine_cpus, so the second implies the first.
  return int64_t(local_ranks) * threads_per_rank < machine_cpus && threads_per_rank < rank_cpus;
}

struct DataParallel::Impl {
  struct Bucket {
    std::vector<Tensor> params;      // the parameters' values (leaves), in launch order
    std::vector<int64_t> offsets;    // element offset of each in flat
    DType dtype = kF32;
    Tensor flat;                     // [numel] of dtype; the parameters' gradients are views of it
    int pending = 0;                 // parameters of this backward not yet ready
  };

  std::vector<Bucket> buckets;
  std::unordered_map<const TensorImpl*, std::pair<size_t, size_t>> where;  // parameter -> (bucket, index)
  std::vector<std::vector<char>> ready;
  std::vector<std::pair<Tensor, std::shared_ptr<PostAccumulateGradHook>>> hooks;
  size_t launched = 0;   // buckets launched in this backward
  bool active = false;   // a synced backward has started (a hook ran) and not finished
  bool sync = true;
  ReduceOp reduce = ReduceOp::Mean;
  double wait_seconds = 0;
  // CPU seconds of this synced backward's hooks and synchronize (copies into
  // the buckets, reductions, waits), and of the communication thread.
  double cpu_seconds = 0, span_start = 0, thread_start = 0, last_cpu_seconds = 0;
  MPI_Comm comm = MPI_COMM_NULL;
  // Without the thread: the launched buckets' non-blocking reductions (one
  // request per piece of at most INT_MAX elements), progressed by the hooks.
  std::vector<MPI_Request> requests;
  // Every rank on this machine: the buckets live in shared memory and the
  // ranks reduce them with loads and stores (NOTE [Shared-memory reduction]).
  std::unique_ptr<detail::SharedBuckets> shm;

  // ---- the communication thread (overlap), guarded by mutex ----
  bool threaded = false;
  std::thread thread;
  std::mutex mutex;
  std::condition_variable work, done_cv;
  std::deque<size_t> queue;
  // Set while the training thread waits in finish(): the thread stops sleeping.
  std::atomic<bool> finishing{false};
  std::mutex poll_mutex;
  std::condition_variable poll_cv;
  size_t done = 0;
  bool stop = false;
  std::exception_ptr error;

  // Bucket b's gradient `i` as a view of its flat buffer: [p.shape] contiguous.
  Tensor view(size_t b, size_t i) const {
    const Bucket& bk = buckets[b];
    const Tensor& p = bk.params[i];
    return Tensor::make_view(bk.flat.storage(), p.shape(), contiguous_strides(p.shape()),
                             bk.flat.storage_offset() + bk.offsets[i], bk.dtype);
  }

  // On the communication thread: a blocking MPI_Allreduce would spin on a
  // core while it waits for the other ranks, taking it from this rank's
  // backward (and, on a machine with fewer cores than threads, from the
  // other ranks'). Non-blocking, tested between sleeps, it leaves the core
  // to backward. The sleeps back off (20 us doubling to 400 us: a test every
  // 50 us cost ~10% of a GPT step's CPU in wake-ups) while backward runs;
  // once the training thread waits in finish() there is nothing left to
  // share the core with, and the thread tests without sleeping.
  void reduce_bucket(size_t b) {
    if (shm) {
      shm->wait_all(b + 1);  // takes chunks while any are left; sleeps on a futex between
      return;
    }
    Bucket& bk = buckets[b];
    MPI_Datatype type = detail::mpi_type(bk.dtype, "DataParallel", true);
    detail::chunked(bk.flat.data_ptr(), bk.flat.numel(), itemsize(bk.dtype), "DataParallel", [&](void* p, int n) {
      MPI_Request req;
      int rc = MPI_Iallreduce(MPI_IN_PLACE, p, n, type, MPI_SUM, comm, &req);
      std::chrono::microseconds pause(20);
      for (int finished = 0; rc == MPI_SUCCESS;) {
        rc = MPI_Test(&req, &finished, MPI_STATUS_IGNORE);
        if (finished) break;
        if (finishing.load(std::memory_order_relaxed)) {
          std::this_thread::yield();
          continue;
        }
        std::unique_lock lock(poll_mutex);
        poll_cv.wait_for(lock, pause, [&] { return finishing.load(); });
        pause = std::min(pause * 2, std::chrono::microseconds(400));
      }
      return rc;
    });
  }

  // Without the thread: starts bucket b's reduction in place (MPI_Iallreduce);
  // the hooks progress it (progress()), finish() waits for it.
  void start_bucket(size_t b) {
    Bucket& bk = buckets[b];
    MPI_Datatype type = detail::mpi_type(bk.dtype, "DataParallel", true);
    detail::chunked(bk.flat.data_ptr(), bk.flat.numel(), itemsize(bk.dtype), "DataParallel", [&](void* p, int n) {
      MPI_Request req = MPI_REQUEST_NULL;
      const int rc = MPI_Iallreduce(MPI_IN_PLACE, p, n, type, MPI_SUM, comm, &req);
      if (rc == MPI_SUCCESS) requests.push_back(req);
      return rc;
    });
  }

  // MPI progresses a non-blocking collective only inside MPI calls (OpenMPI
  // has no progress thread for shared memory or TCP): each ready gradient
  // tests the outstanding reductions, so they advance while backward runs.
  void progress() {
    if (shm) {
      for (size_t b = 0; b < launched; ++b) shm->reduce_some(b);
      return;
    }
    if (requests.empty()) return;
    int all_done = 0;
    detail::check_mpi(MPI_Testall(int(requests.size()), requests.data(), &all_done, MPI_STATUSES_IGNORE),
                      "DataParallel");
    if (all_done) requests.clear();
  }

  void thread_loop() {
    for (;;) {
      size_t b;
      {
        std::unique_lock lock(mutex);
        work.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;  // stop
        b = queue.front();
        queue.pop_front();
      }
      std::exception_ptr err;
      try {
        reduce_bucket(b);
      } catch (...) {
        err = std::current_exception();
      }
      {
        std::lock_guard lock(mutex);
        if (err && !error) error = err;
        ++done;
      }
      done_cv.notify_all();
    }
  }

  void begin_backward() {
    for (size_t b = 0; b < buckets.size(); ++b) {
      std::fill(ready[b].begin(), ready[b].end(), 0);
      buckets[b].pending = int(buckets[b].params.size());
    }
    launched = 0;
    cpu_seconds = 0;
    if (threaded) thread_start = comm_thread_cpu();
    {
      std::lock_guard lock(mutex);
      done = 0;
      error = nullptr;
    }
    active = true;
  }

  // Puts parameter i of bucket b's gradient into its slot of the flat buffer
  // (zeros when it has none) and makes the gradient that slot (a view), so
  // that the reduction works in place and backward's own gradient tensor is
  // released at once. Done as each gradient becomes ready, while it is still
  // in cache.
  void adopt(size_t b, size_t i) {
    Bucket& bk = buckets[b];
    const Tensor& p = bk.params[i];
    Tensor g = p.grad();
    const int64_t item = itemsize(bk.dtype);
    char* dst = static_cast<char*>(bk.flat.data_ptr()) + bk.offsets[i] * item;
    if (!g.defined()) {
      std::memset(dst, 0, size_t(p.numel() * item));
    } else if (g.data_ptr() != dst) {  // (a gradient still viewing its slot needs no copy)
      KILN_CHECK(g.dtype() == bk.dtype && g.numel() == p.numel(), "DataParallel",
                 "a gradient of shape {} ({}) for a parameter of shape {} ({})", to_string(g.shape()),
                 name(g.dtype()), to_string(p.shape()), name(bk.dtype));
      copy_out(g.is_contiguous() ? g : g.contiguous(), dst);
    }
    Tensor leaf = p;
    leaf.set_grad(view(b, i));
  }

  // Starts bucket b's reduction; the parameters that did not become ready
  // (unused in this backward) send what they hold (zeros when nothing).
  void launch(size_t b) {
    Bucket& bk = buckets[b];
    for (size_t i = 0; i < bk.params.size(); ++i)
      if (!ready[b][i]) adopt(b, i);
    ++launched;
    // (Mean's division by the world size is made in the same pass.)
    if (shm) shm->mark_ready(b, reduce == ReduceOp::Mean ? 1.0 / world_size() : 1.0);
    if (!threaded) {
      if (shm)
        shm->reduce_some(b);
      else
        start_bucket(b);
      std::lock_guard lock(mutex);
      ++done;
      return;
    }
    {
      std::lock_guard lock(mutex);
      queue.push_back(b);
    }
    work.notify_one();
  }

  void launch_ready() {
    while (launched < buckets.size() && buckets[launched].pending == 0) launch(launched);
  }

  // Waits for every launched bucket; the gradients (views of the buffers)
  // then hold the sums (divided by the world size for Mean).
  void finish() {
    const double t0 = now_seconds();
    if (shm && !threaded) shm->wait_all(launched);
    if (!threaded && !requests.empty()) {
      // Test in a loop (MPI_Waitall would too): the first 200 us without a
      // pause, then with 20 us sleeps, so that a rank waiting for a slower
      // one does not hold a core the others (or another process) need.
      int rc = MPI_SUCCESS;
      for (int all_done = 0; rc == MPI_SUCCESS;) {
        rc = MPI_Testall(int(requests.size()), requests.data(), &all_done, MPI_STATUSES_IGNORE);
        if (all_done) break;
        if (now_seconds() - t0 > 200e-6) std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
      requests.clear();
      if (rc != MPI_SUCCESS) active = false;
      detail::check_mpi(rc, "DataParallel");
    }
    {
      std::unique_lock lock(mutex);
      if (threaded) {
        {
          std::lock_guard poll(poll_mutex);
          finishing = true;
        }
        poll_cv.notify_all();
      }
      done_cv.wait(lock, [&] { return done == launched; });
      finishing = false;
      if (error) {
        active = false;
        std::rethrow_exception(error);
      }
    }
    wait_seconds = now_seconds() - t0;
    struct LastCpu {  // once the buffers are final (the scaling below is part of the cost)
      Impl& m;
      ~LastCpu() {
        m.last_cpu_seconds = m.cpu_seconds + (thread_cpu() - m.span_start) +
                             (m.threaded ? m.comm_thread_cpu() - m.thread_start : 0.0);
      }
    } last{*this};
    const int world = world_size();
    for (size_t b = 0; b < buckets.size(); ++b) {
      Bucket& bk = buckets[b];
      if (reduce == ReduceOp::Mean && world > 1 && !shm) detail::scale(bk.flat, 1.0 / world);
      // A gradient replaced after it was adopted (a hook that set another)
      // gets its slot back: the reduced sum is in the slot.
      for (size_t i = 0; i < bk.params.size(); ++i) {
        const int64_t item = itemsize(bk.dtype);
        const char* slot = static_cast<const char*>(bk.flat.data_ptr()) + bk.offsets[i] * item;
        Tensor g = bk.params[i].grad();
        if (!g.defined() || g.data_ptr() != slot) {
          Tensor leaf = bk.params[i];
          leaf.set_grad(view(b, i));
        }
      }
    }
    active = false;
  }

  double comm_thread_cpu() {
    clockid_t clock;
    return pthread_getcpuclockid(thread.native_handle(), &clock) == 0 ? cpu_seconds_of(clock) : 0.0;
  }

  // Adds the CPU time of a hook or synchronize to cpu_seconds.
  struct CpuSpan {
    explicit CpuSpan(Impl& m) : m(m) { m.span_start = thread_cpu(); }
    ~CpuSpan() { m.cpu_seconds += thread_cpu() - m.span_start; }
    Impl& m;
  };

  void on_ready(const Tensor& leaf) {
    if (!sync) return;
    CpuSpan span(*this);
    if (!active) begin_backward();
    auto it = where.find(leaf.impl());
    if (it == where.end()) return;
    auto [b, i] = it->second;
    if (ready[b][i]) return;  // a second backward before synchronize: already counted
    ready[b][i] = 1;
    adopt(b, i);
    --buckets[b].pending;
    launch_ready();
    if (!threaded) progress();
    if (launched == buckets.size()) finish();
  }
};

DataParallel::DataParallel(nn::Module& module, DataParallelOptions options)
    : module_(&module), options_(options), impl_(std::make_unique<Impl>()) {
  constexpr const char* op = "DataParallel";
  detail::require_init(op);
  KILN_CHECK(options_.first_bucket_bytes > 0 && options_.bucket_bytes > 0, op,
             "bucket sizes must be positive, got first_bucket_bytes {} and bucket_bytes {}",
             options_.first_bucket_bytes, options_.bucket_bytes);
  KILN_CHECK(options_.reduce == ReduceOp::Mean || options_.reduce == ReduceOp::Sum, op,
             "reduce must be Mean or Sum");
  Impl& m = *impl_;
  m.reduce = options_.reduce;

  // Buckets in reverse registration order, one dtype each.
  nn::ParameterList params = module.parameters();
  std::vector<Tensor> order;
  for (const nn::Parameter& p : params)
    if (p.value().defined() && p.value().requires_grad()) order.push_back(p.value());
  std::reverse(order.begin(), order.end());
  int64_t cap = options_.first_bucket_bytes, bytes = 0;
  for (const Tensor& p : order) {
    KILN_CHECK(p.dtype() == kF32 || p.dtype() == kF64, op,
               "parameters must be f32 or f64 (MPI sums no bf16), got a {} parameter of shape {}", name(p.dtype()),
               to_string(p.shape()));
    if (m.where.count(p.impl())) continue;  // shared
    // A bucket closes once it holds its cap (PyTorch's rule): a tensor larger
    // than the rest of the cap still joins the bucket in progress, so a big
    // tensor that backward finishes early (a CNN's first Linear, 1.6 MB) is
    // reduced while the layers below it run their backward, instead of
    // waiting in the next bucket for the last layer's gradients.
    if (m.buckets.empty() || m.buckets.back().dtype != p.dtype() || bytes >= cap) {
      if (!m.buckets.empty()) cap = options_.bucket_bytes;
      m.buckets.push_back({});
      m.buckets.back().dtype = p.dtype();
      bytes = 0;
    }
    Impl::Bucket& bk = m.buckets.back();
    m.where[p.impl()] = {m.buckets.size() - 1, bk.params.size()};
    // Each gradient's slot starts on a 64-byte boundary (the kernels' vector
    // loads); the padding between slots stays zero.
    const int64_t align = 64 / p.itemsize();
    const int64_t end = bk.params.empty() ? 0 : bk.offsets.back() + bk.params.back().numel();
    bk.offsets.push_back((end + align - 1) / align * align);
    bk.params.push_back(p);
    bytes += p.nbytes();
  }
  detail::check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &m.comm), op);
  MPI_Comm_set_errhandler(m.comm, MPI_ERRORS_RETURN);
  std::vector<int64_t> numel;
  std::vector<DType> dtypes;
  for (Impl::Bucket& bk : m.buckets) {
    numel.push_back(bk.offsets.back() + bk.params.back().numel());
    dtypes.push_back(bk.dtype);
  }
  if (options_.shared_memory && world_size() > 1) m.shm = detail::SharedBuckets::create(m.comm, numel, dtypes);
  for (size_t b = 0; b < m.buckets.size(); ++b) {
    Impl::Bucket& bk = m.buckets[b];
    if (m.shm) {  // a fresh segment: zeros
      bk.flat = Tensor::make_view(m.shm->storage(), {numel[b]}, {1}, m.shm->offset(b), bk.dtype);
    } else {
      bk.flat = Tensor::empty({numel[b]}, bk.dtype);
      std::memset(bk.flat.data_ptr(), 0, size_t(bk.flat.nbytes()));
    }
    m.ready.emplace_back(bk.params.size(), 0);
  }
  if (options_.broadcast_at_start) broadcast_parameters();

  for (Impl::Bucket& bk : m.buckets)
    for (const Tensor& p : bk.params) {
      Impl* impl = impl_.get();
      m.hooks.emplace_back(p, autograd::register_post_accumulate_grad_hook(
                                  p, [impl](const Tensor& leaf) { impl->on_ready(leaf); }));
    }
  const bool thread = options_.overlap.has_value()
                          ? *options_.overlap
                          : world_size() > 1 && comm_thread_has_a_core(local_ranks(m.comm), get_num_threads(),
                                                                       available_cpus(), machine_cpus());
  m.threaded = thread && thread_multiple() && world_size() > 1;
  if (m.threaded) m.thread = std::thread([impl = impl_.get()] { impl->thread_loop(); });
}

DataParallel::~DataParallel() {
  Impl& m = *impl_;
  for (auto& [p, h] : m.hooks) autograd::remove_post_accumulate_grad_hook(p, h);
  if (m.thread.joinable()) {
    {
      std::lock_guard lock(m.mutex);
      m.stop = true;
    }
    m.work.notify_all();
    m.thread.join();
  }
  if (m.comm != MPI_COMM_NULL && is_initialized()) MPI_Comm_free(&m.comm);
}

void DataParallel::set_reduce(ReduceOp op) {
  KILN_CHECK(op == ReduceOp::Mean || op == ReduceOp::Sum, "DataParallel.set_reduce", "reduce must be Mean or Sum");
  KILN_CHECK(!impl_->active, "DataParallel.set_reduce", "a backward's reduction is in progress");
  options_.reduce = impl_->reduce = op;
}

void DataParallel::synchronize() {
  Impl& m = *impl_;
  if (!m.active) return;
  Impl::CpuSpan span(m);
  while (m.launched < m.buckets.size()) m.launch(m.launched);  // unused parameters count as zero
  m.finish();
}

void DataParallel::broadcast_parameters() {
  NoGradGuard no_grad;
  for (const nn::Parameter& p : module_->parameters()) {
    Tensor t = p.value();
    if (t.defined()) broadcast(t, 0);
  }
  for (Tensor& b : module_->buffers())
    if (b.defined()) broadcast(b, 0);
}

void DataParallel::set_sync(bool enabled) { impl_->sync = enabled; }
bool DataParallel::sync_enabled() const { return impl_->sync; }

std::vector<int64_t> DataParallel::bucket_sizes() const {
  std::vector<int64_t> out;
  for (const auto& bk : impl_->buckets) out.push_back(int64_t(bk.params.size()));
  return out;
}

double DataParallel::last_wait_seconds() const { return impl_->wait_seconds; }
double DataParallel::last_comm_cpu_seconds() const { return impl_->last_cpu_seconds; }

bool DataParallel::uses_comm_thread() const { return impl_->threaded; }
bool DataParallel::uses_shared_memory() const { return impl_->shm != nullptr; }

namespace {

class Hooks final : public train::DistributedHooks {
 public:
  explicit Hooks(DataParallel& ddp) : ddp_(&ddp) { ddp.set_reduce(ReduceOp::Sum); }
  int rank() const override { return dist::rank(); }
  int world_size() const override { return dist::world_size(); }
  void all_reduce_sum(std::span<double> values) override {
    if (values.empty()) return;
    detail::all_reduce_raw(values.data(), int64_t(values.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD,
                           "Trainer.all_reduce_sum");
  }
  void set_gradient_sync(bool enabled) override { ddp_->set_sync(enabled); }
  void finish_gradient_sync() override { ddp_->synchronize(); }

 private:
  DataParallel* ddp_;
};

}  // namespace

std::shared_ptr<train::DistributedHooks> trainer_hooks(DataParallel& ddp) { return std::make_shared<Hooks>(ddp); }

}  // namespace kiln::dist
