// DataLoader: batches in the Sampler's order, gathered into a small pool of
// reused buffers, optionally ahead of time by one background thread.
//
// NOTE [DataLoader buffers]: the pool holds prefetch + 2 Batch buffers, each
// a full [B, ...] input and target, allocated together at the first batch
// from the first example's shapes and dtypes (an epoch's short last batch is a
// narrow view [n, ...] of one). A buffer is free when nobody but the pool
// references it: its TensorImpl and its Storage both have use_count 1. A batch
// handed out (or waiting in the prefetch queue) holds a copy of the handle, so
// it is never overwritten while anyone keeps it, a view of it, or an autograd
// node saving it. Why prefetch + 2: the caller's loop (`for (auto& b :
// loader)`, `batch = loader.next()`) still holds the previous batch while it
// asks for the next, and prefetch more sit in the queue, so in the steady
// state prefetch + 2 buffers cycle with no allocation. A buffer still held
// after prefetch + 1 newer fills is kept beyond that pattern (a batch saved for
// later): it leaves the pool to its holder and a new buffer takes its place
// (one allocation per kept batch); if the caller holds even more, the buffer
// filled longest ago is replaced the same way.
//
// NOTE [DataLoader thread]: the worker gathers batch `gather_pos` of the
// current epoch while the queue has room (prefetch slots), reading the
// sampler's order (which only the caller's thread changes, and only after
// stopping the worker: next_epoch, load_state, the destructor). The pool is
// the worker's while it runs. An exception in gather is queued in place of the
// batch and re-thrown by next() on the caller's thread; the loader stays at the
// same position, so the next call retries that batch.
#include "kiln/data/dataloader.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "kiln/core/error.h"

namespace kiln::data {

struct DataLoader::Impl {
  // What the worker hands to next(): a batch or the exception gathering it threw.
  struct Item {
    Batch batch;
    std::exception_ptr error;
  };

  Impl(const Dataset& dataset, const DataLoaderOptions& options, int64_t batches)
      : dataset(dataset),
        batch_size(options.batch_size * options.world_size),
        rank(options.rank),
        world(options.world_size),
        rows(std::min(options.batch_size, dataset.size())),
        prefetch(options.prefetch),
        batches(batches),
        sampler(dataset.size(), options.shuffle, options.seed),
        queue(size_t(options.prefetch)) {}

  const Dataset& dataset;
  const int64_t batch_size;  // global: the per-rank batch times the world size
  const int64_t rank, world;
  const int64_t rows;  // of each buffer: min(batch_size, N), as no batch holds more (a huge batch_size allocates N)
  const int prefetch;
  const int64_t batches;  // per epoch
  Sampler sampler;        // this epoch's order; its own cursor stays 0, position is ours
  int64_t position = 0;   // batches of this epoch handed out

  // ---- buffers (the caller's when prefetch == 0, else the worker's) ----
  bool shaped = false;  // in_row... known from the first example
  Shape in_row, tgt_row;
  DType in_dtype = kF32, tgt_dtype = kI64;
  bool has_target = true;
  std::vector<Batch> pool;       // prefetch + 2 buffers, allocated at the first batch
  std::vector<uint64_t> filled;  // filled[i]: the fill that last used pool[i] (0: none yet)
  uint64_t fills = 0;

  // ---- the worker, guarded by mutex ----
  std::thread worker;
  std::mutex mutex;
  std::condition_variable room, ready;  // room: the worker may gather; ready: next() may take
  std::vector<Item> queue;              // ring of `prefetch` slots
  size_t head = 0, count = 0;           // queue[head] is the oldest of count items
  int64_t gather_pos = 0;               // the batch the worker gathers next
  bool stop = false;

  static bool is_free(const Tensor& t) {
    return !t.defined() || (t.impl_ptr().use_count() == 1 && t.storage().use_count() == 1);
  }
  static bool is_free(const Batch& b) { return is_free(b.input) && is_free(b.target); }

  static Tensor allocate_rows(int64_t n, const Shape& row, DType dtype) {
    Shape shape = row;
    shape.insert(0, n);
    return Tensor::empty(shape, dtype);
  }

  Batch new_buffer() {
    return {allocate_rows(rows, in_row, in_dtype), has_target ? allocate_rows(rows, tgt_row, tgt_dtype) : Tensor()};
  }

  // A full [rows, ...] buffer nobody else references (NOTE [DataLoader buffers]).
  Batch& acquire() {
    const size_t ring = size_t(prefetch) + 2;
    if (pool.empty()) {
      for (size_t i = 0; i < ring; ++i) pool.push_back(new_buffer());
      filled.assign(ring, 0);
    }
    // A buffer still held although prefetch + 1 newer ones were filled since
    // is kept by the caller beyond the loop's pattern (a batch saved for
    // later): it leaves the pool and lives on with its holder, and a new
    // buffer takes its place, so the pool is never short.
    for (size_t i = 0; i < ring; ++i)
      if (filled[i] + uint64_t(prefetch) + 1 < fills && !is_free(pool[i])) {
        pool[i] = new_buffer();
        filled[i] = 0;
      }
    // The free buffer filled longest ago, so a batch the caller let go of
    // stays intact as long as possible; when every one is taken (the caller
    // holds more than the loop's pattern), the oldest is replaced.
    size_t pick = ring;
    for (size_t i = 0; i < ring; ++i)
      if (is_free(pool[i]) && (pick == ring || filled[i] < filled[pick])) pick = i;
    if (pick == ring) {
      pick = size_t(std::min_element(filled.begin(), filled.end()) - filled.begin());
      pool[pick] = new_buffer();
    }
    // Pairs with the holder's release of its last reference: its reads of the
    // old batch happen before our writes.
    std::atomic_thread_fence(std::memory_order_acquire);
    filled[pick] = ++fills;
    return pool[pick];
  }

  static Tensor narrow_rows(const Tensor& t, int64_t n) {
    if (!t.defined()) return t;
    Shape shape = t.shape();
    shape[0] = n;
    return Tensor::make_view(t.storage(), shape, t.strides(), t.storage_offset(), t.dtype());
  }

  // Gathers this rank's part of batch j of this epoch: of the global batch
  // order[j*G, j*G + m), m = min(G, N - j*G), the rows [r*m/W, (r+1)*m/W)
  // (r*B to (r+1)*B for a full batch; one process: all of them).
  Batch fill(int64_t j) {
    const std::vector<int64_t>& order = sampler.order();
    const int64_t global_start = j * batch_size;
    const int64_t m = std::min(batch_size, int64_t(order.size()) - global_start);
    const int64_t start = global_start + rank * m / world;
    const int64_t n = global_start + (rank + 1) * m / world - start;
    if (!shaped) {
      Example first = dataset.get(order[size_t(global_start)]);
      KILN_CHECK(first.input.defined(), "DataLoader", "example {} has an undefined input",
                 order[size_t(global_start)]);
      in_row = first.input.shape();
      in_dtype = first.input.dtype();
      has_target = first.target.defined();
      if (has_target) {
        tgt_row = first.target.shape();
        tgt_dtype = first.target.dtype();
      }
      shaped = true;
    }
    Batch& buffer = acquire();
    Batch out = n == rows ? buffer : Batch{narrow_rows(buffer.input, n), narrow_rows(buffer.target, n)};
    dataset.gather(std::span<const int64_t>(order.data() + start, size_t(n)), out);
    return out;
  }

  void worker_loop() {
    for (;;) {
      int64_t j;
      {
        std::unique_lock lock(mutex);
        room.wait(lock, [&] { return stop || (count < queue.size() && gather_pos < batches); });
        if (stop) return;
        j = gather_pos++;
      }
      Item item;
      try {
        item.batch = fill(j);
      } catch (...) {
        item.error = std::current_exception();
      }
      const bool failed = item.error != nullptr;
      {
        std::lock_guard lock(mutex);
        queue[(head + count) % queue.size()] = std::move(item);
        ++count;
      }
      ready.notify_one();
      if (failed) return;  // next() re-throws it and joins us
    }
  }

  void start_worker() {
    head = count = 0;
    gather_pos = position;
    stop = false;
    worker = std::thread([this] { worker_loop(); });
  }

  // Stops and joins the worker and drops what it gathered ahead (those
  // batches are gathered again when asked for).
  void stop_worker() {
    if (!worker.joinable()) return;
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    room.notify_all();
    worker.join();
    for (Item& item : queue) item = Item{};
    head = count = 0;
  }

  std::optional<Batch> next() {
    if (position == batches) return std::nullopt;
    if (prefetch == 0) {
      Batch b = fill(position);
      ++position;
      return b;
    }
    if (!worker.joinable()) start_worker();
    Item item;
    {
      std::unique_lock lock(mutex);
      ready.wait(lock, [&] { return count > 0; });
      item = std::move(queue[head]);
      head = (head + 1) % queue.size();
      --count;
    }
    room.notify_one();
    if (item.error) {
      stop_worker();
      std::rethrow_exception(item.error);
    }
    ++position;
    return std::move(item.batch);
  }
};

namespace {

int64_t batches_per_epoch(int64_t n, int64_t batch_size, bool drop_last) {
  return n / batch_size + (!drop_last && n % batch_size != 0);  // not (n + B - 1) / B: B may be near 2^63
}

}  // namespace

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  constexpr const char* op = "DataLoader";
  KILN_CHECK(dataset_ != nullptr, op, "dataset is null");
  KILN_CHECK(options_.batch_size > 0, op, "batch_size must be positive, got {}", options_.batch_size);
  KILN_CHECK(options_.prefetch >= 0, op, "prefetch must be non-negative, got {}", options_.prefetch);
  KILN_CHECK(options_.world_size >= 1 && options_.rank >= 0 && options_.rank < options_.world_size, op,
             "rank {} of world_size {}: need 0 <= rank < world_size", options_.rank, options_.world_size);
  KILN_CHECK(options_.batch_size <= std::numeric_limits<int64_t>::max() / options_.world_size, op,
             "batch_size {} times world_size {} overflows", options_.batch_size, options_.world_size);
  const int64_t n = dataset_->size();
  KILN_CHECK(n >= 0, op, "the dataset's size is negative ({})", n);
  const int64_t global = options_.batch_size * options_.world_size;
  KILN_CHECK(!options_.drop_last || n >= global, op,
             "drop_last with a dataset of {} examples and batch_size {}{} leaves no batch", n, options_.batch_size,
             options_.world_size > 1 ? fmt::format(" on each of {} ranks", options_.world_size) : std::string());
  impl_ = std::make_unique<Impl>(*dataset_, options_, batches_per_epoch(n, global, options_.drop_last));
}

DataLoader::~DataLoader() { impl_->stop_worker(); }

int64_t DataLoader::size() const { return impl_->batches; }

int64_t DataLoader::samples_per_epoch() const {
  return options_.drop_last ? impl_->batches * global_batch_size() : dataset_->size();
}

int64_t DataLoader::epoch() const { return impl_->sampler.epoch(); }
int64_t DataLoader::position() const { return impl_->position; }

std::optional<Batch> DataLoader::next() { return impl_->next(); }

void DataLoader::next_epoch() {
  impl_->stop_worker();
  impl_->sampler.next_epoch();
  impl_->position = 0;
}

State DataLoader::state() const {
  State s = impl_->sampler.state();
  // The sampler's cursor at the first batch not yet handed out: batches the
  // worker gathered ahead are not counted, they are gathered again on resume.
  s["cursor"] = std::to_string(std::min(impl_->position * global_batch_size(), dataset_->size()));
  s["batch_size"] = std::to_string(global_batch_size());
  s["drop_last"] = std::to_string(int(options_.drop_last));
  return s;
}

void DataLoader::load_state(const State& state) {
  constexpr const char* op = "DataLoader.load_state";
  const int64_t batch_size = state_i64(state, "batch_size", op);
  const int64_t drop_last = state_i64(state, "drop_last", op);
  const int64_t size = state_i64(state, "size", op);
  const int64_t cursor = state_i64(state, "cursor", op);
  // The global batch: a state written by 2 ranks of batch 32 resumes in one
  // process of batch 64, in the same order.
  KILN_CHECK(batch_size == global_batch_size(), op, "the state is of batch_size {}, this loader's is {}{}", batch_size,
             global_batch_size(),
             options_.world_size > 1
                 ? fmt::format(" ({} on each of {} ranks)", options_.batch_size, options_.world_size)
                 : std::string());
  KILN_CHECK(drop_last == int64_t(options_.drop_last), op, "the state {} drop_last, this loader {}",
             drop_last ? "has" : "has no", options_.drop_last ? "has" : "has not");
  KILN_CHECK(size == dataset_->size(), op, "the state is of a dataset of {} examples, this loader's has {}", size,
             dataset_->size());
  // The cursor must sit at a batch boundary of this loader: min(k * B, N), 0 <= k <= size().
  const int64_t k = cursor >= 0 ? (cursor + batch_size - 1) / batch_size : -1;
  KILN_CHECK(k >= 0 && k <= impl_->batches && std::min(k * batch_size, size) == cursor, op,
             "cursor {} is not at a batch boundary (batch_size {}, {} batches per epoch)", cursor, batch_size,
             impl_->batches);
  State sampler_state = state;
  sampler_state.erase("batch_size");
  sampler_state.erase("drop_last");
  // Stopping the worker changes nothing visible (the position stays; what it
  // gathered ahead is gathered again), so a state the sampler refuses leaves
  // this loader as it was.
  impl_->stop_worker();
  impl_->sampler.load_state(sampler_state);
  impl_->position = k;
}

}  // namespace kiln::data
