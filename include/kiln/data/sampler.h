// Sampler: the order in which a data loader visits a dataset's indices, epoch
// after epoch (PyTorch's RandomSampler / SequentialSampler). A shuffling
// sampler draws each epoch's permutation from its own Generator, so the order
// depends only on the seed, and its state (generator, epoch, cursor) rides in
// a checkpoint: a run resumed mid-epoch sees the rest of the same epoch (I3).
//
//   data::Sampler order(60000, /*shuffle=*/true, /*seed=*/0);
//   for (auto idx = order.next(64); !idx.empty(); idx = order.next(64)) { ... }
//   order.next_epoch();                  // a new permutation, cursor 0
//   ckpt.state("data", order);           // saved and restored with the checkpoint
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/generator.h"
#include "kiln/core/stateful.h"

namespace kiln::data {

class Sampler : public Stateful {
 public:
  /// Indices 0..size-1, in a new random order each epoch (shuffle) or in order.
  explicit Sampler(int64_t size, bool shuffle = true, uint64_t seed = 0);

  int64_t size() const { return size_; }
  bool shuffle() const { return shuffle_; }
  /// The epoch in progress, 0-based.
  int64_t epoch() const { return epoch_; }
  /// Indices handed out in this epoch so far.
  int64_t cursor() const { return cursor_; }
  /// This epoch's whole order.
  const std::vector<int64_t>& order() const { return order_; }

  /// The next min(n, remaining) indices of this epoch; empty once it is done.
  std::vector<int64_t> next(int64_t n);
  /// Starts the next epoch: a new permutation (when shuffling), cursor 0.
  void next_epoch();

  /// {"size", "shuffle", "seed", "offset", "epoch", "cursor"}: "offset" is the
  /// generator's position before this epoch's permutation was drawn.
  State state() const override;
  /// Checks everything (the same size and shuffle, a cursor within the
  /// epoch) before changing anything.
  void load_state(const State& state) override;

 private:
  void draw_order();

  int64_t size_;
  bool shuffle_;
  Generator gen_;
  uint64_t epoch_offset_ = 0;  // gen_'s offset before drawing order_
  int64_t epoch_ = 0;
  int64_t cursor_ = 0;
  std::vector<int64_t> order_;
};

}  // namespace kiln::data
