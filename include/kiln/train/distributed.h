// What the Trainer needs from a run over several processes (SPECS X6), as an
// interface that the dist layer implements (dist::TrainerHooks over a
// dist::DataParallel): train sits below dist and cannot include it.
//
//   dist::DataParallel ddp(*model);
//   train::Trainer trainer(epochs, callbacks, {.accumulate = 2, .distributed = dist::trainer_hooks(ddp)});
//
// With hooks, a training step is the accumulation step (train::accumulation_step):
// every rank's micro-batch losses are sums over items divided by the number of
// valid items of the whole step (all micro-batches of all ranks), so the
// gradients summed over ranks are exactly the gradient of one process over the
// combined batch, up to summation order.
#pragma once

#include <cstdint>
#include <span>

namespace kiln::train {

class DistributedHooks {
 public:
  virtual ~DistributedHooks() = default;
  /// This process' rank and the number of processes.
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /// In place: each value summed over every rank (counts, loss sums, metrics).
  /// Every rank calls it with the same number of values.
  virtual void all_reduce_sum(std::span<double> values) = 0;
  /// Whether the next backward sums gradients across ranks (false: no_sync,
  /// the gradients accumulate locally until a synced backward).
  virtual void set_gradient_sync(bool enabled) = 0;
  /// Waits until every gradient of the synced backward holds its sum over
  /// ranks (not the mean: the losses are already divided by the global count).
  virtual void finish_gradient_sync() = 0;
};

/// The seed of rank `rank`'s copy of a random stream whose seed is `seed`
/// (RunOptions::rank_streams): `seed` itself for rank 0 (so rank 0 of a run
/// draws what one process would), a SplitMix64 mix of (seed, rank) for the
/// others, distinct for every rank and reproducible.
uint64_t rank_stream_seed(uint64_t seed, int rank);

}  // namespace kiln::train
