// The caching CPU allocator. Blocks are rounded up to a size class (powers of
// two up to 1 MiB, then whole MiBs) and kept on a free list per class when
// returned, so steady-state training never reaches malloc.
#include "kiln/core/allocator.h"

#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace kiln {

namespace {

constexpr size_t kAlign = 64;
constexpr size_t kMiB = size_t(1) << 20;

size_t size_class(size_t n) {
  if (n <= kAlign) return kAlign;
  if (n <= kMiB) return size_t(1) << (64 - __builtin_clzll(n - 1));
  return (n + kMiB - 1) / kMiB * kMiB;
}

struct Cache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free;  // size class -> blocks
  MemoryStats stats;
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: tensors may outlive main's statics
  return *c;
}

}  // namespace

namespace detail {

void* cpu_allocate(size_t nbytes) {
  size_t cls = size_class(nbytes);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    ++c.stats.alloc_count;
    c.stats.current_bytes += int64_t(cls);
    if (c.stats.current_bytes > c.stats.peak_bytes) c.stats.peak_bytes = c.stats.current_bytes;
    auto it = c.free.find(cls);
    if (it != c.free.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.stats.cached_bytes -= int64_t(cls);
      return p;
    }
    ++c.stats.malloc_count;
  }
  void* p = std::aligned_alloc(kAlign, cls);
  if (!p) {
    empty_cache();
    p = std::aligned_alloc(kAlign, cls);
  }
  if (!p) {
    std::lock_guard<std::mutex> lock(c.mu);
    c.stats.current_bytes -= int64_t(cls);
    throw std::bad_alloc();
  }
  return p;
}

void cpu_deallocate(void* ptr, size_t nbytes) {
  if (!ptr) return;
  size_t cls = size_class(nbytes);
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.stats.current_bytes -= int64_t(cls);
  c.stats.cached_bytes += int64_t(cls);
  c.free[cls].push_back(ptr);
}

}  // namespace detail

MemoryStats memory_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats;
}

void empty_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  for (auto& [cls, blocks] : c.free) {
    for (void* p : blocks) std::free(p);
    c.stats.cached_bytes -= int64_t(cls * blocks.size());
    blocks.clear();
  }
}

void reset_peak_memory_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.stats.peak_bytes = c.stats.current_bytes;
}

}  // namespace kiln
