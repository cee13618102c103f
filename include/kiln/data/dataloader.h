// DataLoader: batches of a Dataset in a seeded order (PyTorch's DataLoader).
//
//   data::DataLoader loader(train, {.batch_size = 64, .shuffle = true, .seed = 0});
//   for (const data::Batch& b : loader) { ... }   // one epoch: b.input [64, ...], b.target [64]
//   for (const data::Batch& b : loader) { ... }   // the next epoch, in a new order
//   ckpt.state("data", loader);                   // resumes mid-epoch at the same batch
//
// Order comes from a data::Sampler with its own Generator seeded by
// options.seed, so it depends only on the seed, and the loader's state (the
// sampler's, less the batches prefetched but not yet handed out) rides in a
// checkpoint. With prefetch > 0 a background thread gathers the next batches
// while the caller trains on the current one.
//
// Batches are the loader's reused buffers (prefetch + 2 of them, no
// allocation per step): a batch stays valid as long as the caller holds it (or
// a view of it, or an autograd node saves it): a buffer still referenced
// outside the loader is never overwritten, the loader allocates a new one
// instead. Let go of batches you are done with, or each one kept costs an
// allocation. NOTE [DataLoader buffers] in src/data/dataloader.cpp.
//
// The Dataset's get()/gather() run on the worker thread when prefetch > 0, so
// they must be safe to call concurrently with the dataset's const methods.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "kiln/core/stateful.h"
#include "kiln/data/dataset.h"
#include "kiln/data/sampler.h"

namespace kiln::data {

struct DataLoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;  // drop an epoch's last batch when it is smaller than batch_size
  int prefetch = 2;        // batches gathered ahead by a background thread; 0: none, no thread
  // Data parallelism (docs/distributed.md): with world_size W, each step's
  // global batch is batch_size * W consecutive examples of the epoch's order
  // (the order of one process with that batch), and rank r gets the r-th of
  // W equal slices (an epoch's short last batch is split as evenly as it
  // goes). The state counts global batches, so a checkpoint resumes under
  // any world size whose batch_size * W is the same.
  int rank = 0;
  int world_size = 1;
};

class DataLoader : public Stateful {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});
  ~DataLoader() override;
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  const Dataset& dataset() const { return *dataset_; }
  const DataLoaderOptions& options() const { return options_; }
  int64_t batch_size() const { return options_.batch_size; }
  /// batch_size() * world_size: the examples of one step over every rank.
  int64_t global_batch_size() const { return options_.batch_size * options_.world_size; }
  /// Batches per epoch (len(loader) in PyTorch).
  int64_t size() const;
  /// Examples per epoch over every rank (size() * global_batch_size() when
  /// drop_last, else the data set's size).
  int64_t samples_per_epoch() const;

  /// The epoch in progress, 0-based; position(): batches of it handed out so far.
  int64_t epoch() const;
  int64_t position() const;
  /// True when every batch of the current epoch has been handed out.
  bool epoch_done() const { return position() == size(); }

  /// The next batch of the current epoch, or nullopt when it is done.
  std::optional<Batch> next();
  /// Starts the next epoch (a new order when shuffling), discarding what is
  /// left of this one.
  void next_epoch();

  /// Range over the rest of the current epoch; begin() first starts the next
  /// epoch when the current one is done, so each for-loop is one epoch.
  class Iterator;
  Iterator begin();
  std::default_sentinel_t end() { return {}; }

  /// The sampler's state at the first batch not yet handed out, plus
  /// {"batch_size" (the global batch), "drop_last"}; load_state checks them
  /// before changing anything.
  State state() const override;
  void load_state(const State& state) override;

 private:
  struct Impl;
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  std::unique_ptr<Impl> impl_;
};

class DataLoader::Iterator {
 public:
  using value_type = Batch;
  using difference_type = std::ptrdiff_t;
  explicit Iterator(DataLoader* loader) : loader_(loader), batch_(loader->next()) {}
  const Batch& operator*() const { return *batch_; }
  const Batch* operator->() const { return &*batch_; }
  Iterator& operator++() {
    batch_ = loader_->next();
    return *this;
  }
  bool operator==(std::default_sentinel_t) const { return !batch_.has_value(); }

 private:
  DataLoader* loader_;
  std::optional<Batch> batch_;
};

inline DataLoader::Iterator DataLoader::begin() {
  if (epoch_done()) next_epoch();
  return Iterator(this);
}

}  // namespace kiln::data
