// Gradient buckets in shared memory, reduced by the ranks of one machine
// without MPI (private to src/dist; used by dist::DataParallel).
//
// NOTE [Shared-memory reduction]: when every rank of the run is on this
// machine, each rank's bucket buffers live in a POSIX shared-memory segment
// that every other rank maps too. A bucket is then reduced by plain loads and
// stores: its elements are cut into chunks of 64 KiB, and a chunk's reducer
// adds the chunk over the ranks' buffers in rank order (rank 0's + rank 1's +
// ..., so every rank gets the same bits) and stores the sum into every
// rank's buffer. No message is copied, nothing waits for MPI's progress (a
// non-blocking MPI collective advances only inside MPI calls), and any rank
// can reduce any chunk:
//
//   - mark_ready(b): this rank's bucket b holds this backward's gradients
//     (the gradient hooks copied them in, while they were in cache);
//   - reduce_some(b): from a gradient hook, once every rank is ready, this
//     rank reduces its own share of b's chunks (1/N of them) while they are
//     warm, unless another rank is idle in wait_all (it will take them);
//   - wait_all(n): this rank has nothing else to do until buckets [0, n) are
//     reduced: it takes any unclaimed chunk of them (its share or another's),
//     so the rank that finished its backward first does the work the others
//     have not started, and sleeps on a futex when there is none.
//
// Chunks are claimed with compare-and-swap on counters in rank 0's segment;
// every counter only grows (a bucket's g-th reduction owns claims [(g - 1) c,
// g c) of a share of c chunks), so nothing is reset between steps. A rank
// starts bucket b's next reduction only after the last one completed on every
// rank (it waited for it), so a rank's buffer is written by the others only
// while it is marked ready for the reduction in progress.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/core/storage.h"

namespace kiln::dist::detail {

class SharedBuckets {
 public:
  /// Collective over comm. numel[b], dtypes[b]: bucket b's elements and their
  /// dtype (f32 or f64). Null on every rank when not every rank of comm is on
  /// this machine or a segment cannot be made (then MPI reduces the buckets).
  static std::unique_ptr<SharedBuckets> create(MPI_Comm comm, const std::vector<int64_t>& numel,
                                               const std::vector<DType>& dtypes);
  ~SharedBuckets();
  SharedBuckets(const SharedBuckets&) = delete;
  SharedBuckets& operator=(const SharedBuckets&) = delete;

  /// This rank's segment (the gradient views keep it mapped) and bucket b's
  /// element offset in it.
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  int64_t offset(size_t b) const { return buckets_[b].offset; }

  /// The sums are multiplied by scale (every rank passes the same: 1, or
  /// ReduceOp::Mean's 1 / world size), in the same pass.
  void mark_ready(size_t b, double scale = 1.0);
  /// From a hook: reduces this rank's share of bucket b if every rank is ready.
  void reduce_some(size_t b);
  /// Reduces and waits until buckets [0, n) are reduced on every rank.
  void wait_all(size_t n);

 private:
  struct Bucket {
    int64_t offset = 0;  // elements of dtype, in every rank's segment
    DType dtype = kF32;
    int64_t numel = 0;
    int64_t chunks = 0;
    int64_t generation = 0;  // reductions this rank has started
    double scale = 1.0;
  };
  SharedBuckets() = default;
  // Counters in rank 0's segment, each on a cache line of its own.
  std::atomic<int64_t>& counter(int64_t line) const;
  std::atomic<int64_t>& ready(size_t b, int r) const;
  std::atomic<int64_t>& claimed(size_t b, int share) const;
  std::atomic<int64_t>& done(size_t b) const;
  std::atomic<int32_t>& word(int64_t line) const;  // seq (futex), sleepers, idle
  bool all_ready(size_t b) const;
  bool complete(size_t b) const;
  // Claims and reduces one chunk of bucket b from `share`; false when none is left.
  bool reduce_one(size_t b, int share);
  void reduce_chunk(size_t b, int64_t chunk);
  void wake();

  int rank_ = 0, size_ = 1;
  std::vector<Bucket> buckets_;
  std::shared_ptr<Storage> storage_;
  std::vector<char*> bases_;                    // every rank's segment, mapped here
  std::vector<std::pair<char*, size_t>> peers_;  // the other ranks' mappings, unmapped at the end
  char* control_ = nullptr;                     // rank 0's segment's first bytes
};

}  // namespace kiln::dist::detail
