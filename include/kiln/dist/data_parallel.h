// dist::DataParallel (SPECS X6): data-parallel training of any module over
// the ranks of an MPI run, PyTorch DDP's design in C++.
//
//   dist::init(&argc, &argv);
//   auto model = nn::make<Net>(rngs);                  // the same seed or not: rank 0's weights win
//   dist::DataParallel ddp(*model);                    // broadcasts parameters and buffers from rank 0
//   optim::AdamW opt(model->parameters(), {...});
//   for (...) {
//     Tensor loss = loss_fn(model(x_of_this_rank), y_of_this_rank);
//     loss.backward();                                 // buckets are averaged while backward runs
//     ddp.synchronize();                               // (a no-op once every bucket is back)
//     opt.step(); opt.zero_grad();
//   }
//   { auto guard = ddp.no_sync(); loss1.backward(); }  // accumulate locally, reduce on the next synced backward
//
// NOTE [Gradient buckets]: the parameters are grouped, in reverse
// registration order (about the order backward finishes them), into buckets
// that close once they hold `bucket_bytes` (the first `first_bucket_bytes`,
// small, so that communication starts early; PyTorch's rule: the tensor that
// crosses the cap is the bucket's last). Each bucket owns one flat buffer, and
// each parameter's gradient is a view of its slot in it (PyTorch's
// gradient_as_bucket_view): a post-accumulate-grad hook on each parameter
// (kiln/autograd/hooks.h) copies the gradient backward produced into its
// slot while it is in cache, makes the view the gradient (backward's tensor
// is freed) and marks it ready; when every parameter of the next bucket in
// order is ready, the bucket is all-reduced in place, non-blocking, while
// backward goes on. When every rank is on this machine the buffers are in
// shared memory and the ranks add the buckets with loads and stores, chunk by
// chunk, each chunk once for all ranks (NOTE [Shared-memory reduction] in
// src/dist/shared_buckets.h); otherwise MPI_Iallreduce. Either is progressed
// by a communication thread (overlap = true, with MPI_THREAD_MULTIPLE) or
// from the caller's thread by each later hook (overlap = false; MPI advances
// a collective only inside its calls); unset, the thread only where it has a
// core of its own (NOTE [Progress policy]). Buckets are always launched in
// index order, so every rank issues the same collectives in the same order
// whatever its backward's order. When the last bucket is launched the hook waits for all
// of them: after backward() the gradients (the views) hold the sums, with no
// copy back. synchronize() does the same for a backward that left parameters
// unused (their gradient counts as zero). The views are reused by the next
// synced backward: clone a gradient to keep it past that.
// Exactness: the sum of two values does not depend on their order, so with 2
// ranks and ReduceOp::Sum the reduced gradients equal one process
// accumulating both ranks' micro-batches bit for bit (tests/dist).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "kiln/dist/process_group.h"
#include "kiln/nn/module.h"
#include "kiln/train/distributed.h"

namespace kiln::dist {

struct DataParallelOptions {
  int64_t first_bucket_bytes = int64_t(1) << 20;  // 1 MiB: the first reduction starts early
  int64_t bucket_bytes = int64_t(25) << 20;       // 25 MiB, PyTorch's bucket_cap_mb
  /// Mean divides the summed gradients by the world size (PyTorch's DDP, for
  /// losses that are each rank's own mean); Sum leaves them summed (losses
  /// already divided by the global count, train::accumulation_step).
  ReduceOp reduce = ReduceOp::Mean;
  /// How the buckets' reductions progress while backward runs. true: on a
  /// communication thread (needs MPI_THREAD_MULTIPLE); false, or without
  /// MPI_THREAD_MULTIPLE: non-blocking reductions from the caller's thread,
  /// progressed by the gradient hooks (no extra thread competing for the
  /// cores; less progress between hooks). Unset (the default): the thread
  /// only where it has a core of its own (NOTE [Progress policy]).
  std::optional<bool> overlap = std::nullopt;
  /// When every rank runs on this machine, keep the buckets in shared memory
  /// and reduce them with loads and stores instead of MPI's all-reduce (NOTE
  /// [Shared-memory reduction] in src/dist/shared_buckets.h); false: MPI.
  bool shared_memory = true;
  /// Broadcast parameters and buffers from rank 0 at construction.
  bool broadcast_at_start = true;
};

class DataParallel {
 public:
  /// dist::init() must have run. Every rank wraps the same architecture,
  /// with the same bucket sizes and shared_memory (collectives at construction).
  explicit DataParallel(nn::Module& module, DataParallelOptions options = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  nn::Module& module() const { return *module_; }
  const DataParallelOptions& options() const { return options_; }
  void set_reduce(ReduceOp op);

  /// Waits until every gradient of the last synced backward is reduced
  /// (parameters that received no gradient count as zero). Idempotent.
  void synchronize();
  /// Copies rank 0's parameters and buffers to every rank.
  void broadcast_parameters();

  /// While alive, backward accumulates gradients locally without reducing
  /// (PyTorch's no_sync()); the next synced backward reduces the sum.
  class NoSync;
  [[nodiscard]] NoSync no_sync();
  void set_sync(bool enabled);
  bool sync_enabled() const;

  /// Whether a communication thread reduces the buckets (else the hooks do).
  bool uses_comm_thread() const;
  /// Whether the buckets are reduced through shared memory (else by MPI).
  bool uses_shared_memory() const;
  /// Buckets as parameter counts, first launched first (for tests, docs).
  std::vector<int64_t> bucket_sizes() const;
  /// Seconds the caller waited for reductions in the last synchronize (the
  /// part of communication that backward did not hide).
  double last_wait_seconds() const;
  /// CPU seconds this rank spent on the last synced backward's gradients: in
  /// the gradient hooks and synchronize (copies into the buckets, reductions,
  /// waiting) and on the communication thread. Compute excluded, so that
  /// configurations compare on a busy machine (bench/ddp_worker.cpp).
  double last_comm_cpu_seconds() const;

 private:
  struct Impl;
  nn::Module* module_;
  DataParallelOptions options_;
  std::unique_ptr<Impl> impl_;
};

class DataParallel::NoSync {
 public:
  explicit NoSync(DataParallel& ddp) : ddp_(&ddp), was_(ddp.sync_enabled()) { ddp.set_sync(false); }
  ~NoSync() {
    if (ddp_) ddp_->set_sync(was_);
  }
  NoSync(NoSync&& o) noexcept : ddp_(o.ddp_), was_(o.was_) { o.ddp_ = nullptr; }
  NoSync(const NoSync&) = delete;
  NoSync& operator=(const NoSync&) = delete;
  NoSync& operator=(NoSync&&) = delete;

 private:
  DataParallel* ddp_;
  bool was_;
};

inline DataParallel::NoSync DataParallel::no_sync() { return NoSync(*this); }

/// NOTE [Progress policy]: DataParallelOptions::overlap's default. A
/// communication thread pays only where it has a core that no training thread
/// uses: the threads of this machine's ranks (local_ranks x threads_per_rank)
/// leave one of its cores (machine_cpus) idle, and this rank's threads leave
/// one of the CPUs it may run on (rank_cpus: affinity mask, CPU quota) idle.
/// Otherwise each of the thread's wake-ups takes a core from backward (on this
/// rank or another), and progress from the gradient hooks, which costs no
/// thread, is the cheaper (measured: docs/distributed.md, Benchmarks).
/// DataParallel asks it with the ranks sharing this node
/// (MPI_COMM_TYPE_SHARED), kiln::get_num_threads(), kiln::available_cpus()
/// and the machine's CPUs. Arguments below 1 are a kiln::Error.
bool comm_thread_has_a_core(int local_ranks, int threads_per_rank, int rank_cpus, int machine_cpus);

/// The Trainer's view of a DataParallel (RunOptions::distributed): rank and
/// world size, metric sums over MPI_COMM_WORLD, gradient sync through ddp with
/// ReduceOp::Sum (set here: the accumulation step divides by the global count).
std::shared_ptr<train::DistributedHooks> trainer_hooks(DataParallel& ddp);

}  // namespace kiln::dist
