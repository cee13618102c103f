// NOTE [Shared-memory reduction] in src/dist/shared_buckets.h.
#include "src/dist/shared_buckets.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <ctime>
#include <new>
#include <string>

#include "kiln/core/error.h"
#include "src/dist/mpi_util.h"

namespace kiln::dist::detail {

namespace {

constexpr int64_t kLine = 64;
constexpr int64_t kChunkBytes = int64_t(64) << 10;  // a chunk: 64 KiB of a bucket
constexpr int64_t kPage = 4096;
// Spins (a pause and a scan of the counters, 20-30 ns) before a waiting rank
// sleeps on the futex: a peer's reply within ~10-20 us is caught awake; a
// longer wait costs no CPU.
constexpr int kSpins = 600;

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// The futex word is shared between processes: no FUTEX_PRIVATE_FLAG.
void futex_wait(std::atomic<int32_t>* word, int32_t value) {
  timespec timeout{0, 20'000'000};  // 20 ms: a wake-up lost to a dead peer is re-checked
  syscall(SYS_futex, reinterpret_cast<int32_t*>(word), FUTEX_WAIT, value, &timeout, nullptr, 0);
}

void futex_wake(std::atomic<int32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<int32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void unmap(void* data, void* bytes) { munmap(data, reinterpret_cast<size_t>(bytes)); }

// x * scale as detail::scale computes it (ReduceOp::Mean's 1 / world size):
// in double, rounded to T, so that both transports give the same bits.
template <class T>
T scaled(T x, double scale) {
  return T(double(x) * scale);
}

// Sums elements [lo, hi) over the ranks' buffers in rank order, times scale
// (1: none), and stores the result into every buffer.
template <class T>
void sum_into_all(char* const* bases, int n, int64_t offset, int64_t lo, int64_t hi, double scale) {
  if (n == 2) {  // the common case, vectorised: a + b into both
    T* __restrict a = reinterpret_cast<T*>(bases[0]) + offset;
    T* __restrict b = reinterpret_cast<T*>(bases[1]) + offset;
    if (scale == 1.0) {
      for (int64_t i = lo; i < hi; ++i) {
        const T s = a[i] + b[i];
        a[i] = s;
        b[i] = s;
      }
    } else {
      for (int64_t i = lo; i < hi; ++i) {
        const T s = scaled(T(a[i] + b[i]), scale);
        a[i] = s;
        b[i] = s;
      }
    }
    return;
  }
  constexpr int64_t kBlock = 1024;
  T acc[kBlock];
  for (int64_t i0 = lo; i0 < hi; i0 += kBlock) {
    const int64_t m = std::min(kBlock, hi - i0);
    const T* first = reinterpret_cast<const T*>(bases[0]) + offset + i0;
    std::copy(first, first + m, acc);
    for (int r = 1; r < n; ++r) {
      const T* src = reinterpret_cast<const T*>(bases[r]) + offset + i0;
      for (int64_t i = 0; i < m; ++i) acc[i] += src[i];
    }
    if (scale != 1.0)
      for (int64_t i = 0; i < m; ++i) acc[i] = scaled(acc[i], scale);
    for (int r = 0; r < n; ++r) std::copy(acc, acc + m, reinterpret_cast<T*>(bases[r]) + offset + i0);
  }
}

}  // namespace

std::atomic<int64_t>& SharedBuckets::counter(int64_t line) const {
  return *std::launder(reinterpret_cast<std::atomic<int64_t>*>(control_ + line * kLine));
}
std::atomic<int32_t>& SharedBuckets::word(int64_t line) const {
  return *std::launder(reinterpret_cast<std::atomic<int32_t>*>(control_ + line * kLine));
}
// Lines 0-2: the futex word (bumped at every change), the sleepers on it, the
// ranks idle in wait_all. Then per bucket: ready[N], claimed[N], done.
std::atomic<int64_t>& SharedBuckets::ready(size_t b, int r) const {
  return counter(3 + int64_t(b) * (2 * size_ + 1) + r);
}
std::atomic<int64_t>& SharedBuckets::claimed(size_t b, int share) const {
  return counter(3 + int64_t(b) * (2 * size_ + 1) + size_ + share);
}
std::atomic<int64_t>& SharedBuckets::done(size_t b) const {
  return counter(3 + int64_t(b) * (2 * size_ + 1) + 2 * size_);
}

std::unique_ptr<SharedBuckets> SharedBuckets::create(MPI_Comm comm, const std::vector<int64_t>& numel,
                                                     const std::vector<DType>& dtypes) {
  constexpr const char* op = "DataParallel";
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // Every rank on this machine?
  MPI_Comm node = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), op);
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);
  if (node_size != size || size < 2 || numel.empty()) return nullptr;  // the same answer on every rank

  std::unique_ptr<SharedBuckets> s(new SharedBuckets());
  s->rank_ = rank;
  s->size_ = size;
  // Segment: the control lines (used in rank 0's), then each bucket on a page boundary.
  const int64_t lines = 3 + int64_t(numel.size()) * (2 * size + 1);
  int64_t bytes = round_up(lines * kLine, kPage);
  for (size_t b = 0; b < numel.size(); ++b) {
    Bucket bk;
    bk.dtype = dtypes[b];
    const int64_t item = itemsize(bk.dtype);
    bk.offset = bytes / item;
    bk.numel = numel[b];
    bk.chunks = std::max<int64_t>(1, (bk.numel * item + kChunkBytes - 1) / kChunkBytes);
    s->buckets_.push_back(bk);
    bytes = round_up(bytes + bk.numel * item, kPage);
  }

  // A name no other run or DataParallel uses: rank 0's pid, a counter, the rank.
  static int instance = 0;
  int64_t id[2] = {int64_t(getpid()), int64_t(instance++)};
  check_mpi(MPI_Bcast(id, 2, MPI_INT64_T, 0, comm), op);
  auto name_of = [&](int r) {
    return "/kiln-ddp-" + std::to_string(id[0]) + "-" + std::to_string(id[1]) + "-" + std::to_string(r);
  };

  // Make this rank's segment. posix_fallocate reserves the memory now: a
  // full /dev/shm is a failure here, not a SIGBUS at the first touch.
  char* mine = nullptr;
  {
    const std::string name = name_of(rank);
    const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd >= 0) {
      if (posix_fallocate(fd, 0, off_t(bytes)) == 0) {
        void* p = mmap(nullptr, size_t(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) mine = static_cast<char*>(p);
      }
      close(fd);
      if (!mine) shm_unlink(name.c_str());
    }
  }
  if (mine && rank == 0) {
    // The counters start at zero (a fresh segment reads zeros).
    for (int64_t l = 0; l < 3; ++l) new (mine + l * kLine) std::atomic<int32_t>(0);
    for (int64_t l = 3; l < lines; ++l) new (mine + l * kLine) std::atomic<int64_t>(0);
  }
  int ok = mine != nullptr;
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm), op);
  if (ok) {
    // Map the others' segments.
    s->bases_.assign(size_t(size), nullptr);
    s->bases_[size_t(rank)] = mine;
    for (int r = 0; r < size && ok; ++r) {
      if (r == rank) continue;
      const int fd = shm_open(name_of(r).c_str(), O_RDWR, 0600);
      void* p = fd >= 0 ? mmap(nullptr, size_t(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
      if (fd >= 0) close(fd);
      if (p == MAP_FAILED) {
        ok = 0;
      } else {
        s->bases_[size_t(r)] = static_cast<char*>(p);
        s->peers_.emplace_back(static_cast<char*>(p), size_t(bytes));
      }
    }
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm), op);
    if (mine) shm_unlink(name_of(rank).c_str());  // every rank has mapped it (or given up): the name can go
  }
  if (!ok) {
    if (mine) {
      shm_unlink(name_of(rank).c_str());  // (a no-op when the names went above)
      munmap(mine, size_t(bytes));
    }
    return nullptr;  // ~SharedBuckets unmaps the peers
  }
  s->control_ = s->bases_[0];
  s->storage_ = std::make_shared<Storage>(mine, size_t(bytes), kCPU, &unmap,
                                          reinterpret_cast<void*>(static_cast<size_t>(bytes)));
  // The fresh segment's zeros: the padding between gradient slots stays zero.
  return s;
}

SharedBuckets::~SharedBuckets() {
  for (auto [p, n] : peers_) munmap(p, n);
}

bool SharedBuckets::all_ready(size_t b) const {
  const int64_t g = buckets_[b].generation;
  for (int r = 0; r < size_; ++r)
    if (ready(b, r).load(std::memory_order_acquire) < g) return false;
  return true;
}

bool SharedBuckets::complete(size_t b) const {
  const Bucket& bk = buckets_[b];
  return done(b).load(std::memory_order_acquire) >= bk.generation * bk.chunks;
}

void SharedBuckets::wake() {
  word(0).fetch_add(1, std::memory_order_seq_cst);
  if (word(1).load(std::memory_order_seq_cst) > 0) futex_wake(&word(0));
}

void SharedBuckets::mark_ready(size_t b, double scale) {
  Bucket& bk = buckets_[b];
  bk.scale = scale;
  ++bk.generation;
  ready(b, rank_).store(bk.generation, std::memory_order_release);
  wake();
}

void SharedBuckets::reduce_chunk(size_t b, int64_t chunk) {
  const Bucket& bk = buckets_[b];
  const int64_t per = std::max<int64_t>(1, kChunkBytes / itemsize(bk.dtype));
  const int64_t lo = chunk * per, hi = std::min(bk.numel, lo + per);
  if (bk.dtype == kF64)
    sum_into_all<double>(bases_.data(), size_, bk.offset, lo, hi, bk.scale);
  else
    sum_into_all<float>(bases_.data(), size_, bk.offset, lo, hi, bk.scale);
}

bool SharedBuckets::reduce_one(size_t b, int share) {
  const Bucket& bk = buckets_[b];
  const int64_t first = bk.chunks * share / size_, count = bk.chunks * (share + 1) / size_ - first;
  if (count == 0) return false;
  // This reduction's claims are [(g - 1) count, g count); the counter never
  // passes the end, so the next reduction's claims start where they should.
  const int64_t begin = (bk.generation - 1) * count, end = bk.generation * count;
  std::atomic<int64_t>& c = claimed(b, share);
  int64_t at = c.load(std::memory_order_relaxed);
  do {
    if (at >= end) return false;
  } while (!c.compare_exchange_weak(at, at + 1, std::memory_order_acq_rel, std::memory_order_relaxed));
  reduce_chunk(b, first + (at - begin));
  // The sums are stored in every rank's buffer before the count says so.
  if (done(b).fetch_add(1, std::memory_order_acq_rel) + 1 == bk.generation * bk.chunks) wake();
  return true;
}

void SharedBuckets::reduce_some(size_t b) {
  if (complete(b) || !all_ready(b)) return;
  // A rank idle in wait_all takes the chunks; this one goes on with backward.
  if (word(2).load(std::memory_order_relaxed) > 0) return;
  while (reduce_one(b, rank_)) {
  }
}

void SharedBuckets::wait_all(size_t n) {
  n = std::min(n, buckets_.size());
  word(2).fetch_add(1, std::memory_order_seq_cst);  // idle: the others leave their chunks to this rank
  int spins = 0;
  for (;;) {
    const int32_t seen = word(0).load(std::memory_order_seq_cst);
    bool all_done = true, worked = false;
    for (size_t b = 0; b < n; ++b) {
      if (complete(b)) continue;
      all_done = false;
      if (!all_ready(b)) continue;
      // Its own share first, then the others' unclaimed chunks.
      for (int k = 0; k < size_; ++k)
        while (reduce_one(b, (rank_ + k) % size_)) worked = true;
    }
    if (all_done) break;
    if (worked) {
      spins = 0;
      continue;
    }
    if (++spins < kSpins) {
      cpu_relax();
      continue;
    }
    word(1).fetch_add(1, std::memory_order_seq_cst);
    if (word(0).load(std::memory_order_seq_cst) == seen) futex_wait(&word(0), seen);
    word(1).fetch_sub(1, std::memory_order_seq_cst);
    spins = 0;
  }
  word(2).fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace kiln::dist::detail
