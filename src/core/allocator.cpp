// Device memory: allocate() picks the allocator of the device (the CPU's is
// the only one in this build; a GPU backend adds its own case), and the
// caching CPU allocator. Blocks are rounded up to a size class (powers of
// two up to 1 MiB, then whole MiBs) and kept on a free list per class when
// returned, so steady-state training never reaches malloc. A block the
// system refuses is a kiln::Error "[allocate] out of memory: ..." (size_check.h).
#include "kiln/core/allocator.h"

#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kiln/core/backends.h"
#include "kiln/core/error.h"
#include "kiln/core/size_check.h"

namespace kiln {

namespace {

constexpr size_t kAlign = 64;
constexpr size_t kMiB = size_t(1) << 20;
// No block is larger: keeps size_class's rounding far from overflow, and is
// beyond any machine's memory anyway.
constexpr size_t kMaxBytes = size_t(1) << 62;

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
  KILN_CHECK(nbytes <= kMaxBytes, kAllocateOp,
             "out of memory: {} bytes requested, more than the 2^62 any block may have", nbytes);
  const size_t cls = size_class(nbytes);
  Cache& c = cache();
  auto count = [&c, cls] {  // with c.mu held
    ++c.stats.alloc_count;
    c.stats.current_bytes += int64_t(cls);
    if (c.stats.current_bytes > c.stats.peak_bytes) c.stats.peak_bytes = c.stats.current_bytes;
  };
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.free.find(cls);
    if (it != c.free.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.stats.cached_bytes -= int64_t(cls);
      count();
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlign, cls);
  if (!p) {
    empty_cache();
    p = std::aligned_alloc(kAlign, cls);
  }
  // A refused block changes no counter, so peak_bytes stays what was really held.
  KILN_CHECK(p != nullptr, kAllocateOp, "out of memory: the system refused a block of {} bytes ({})", cls,
             format_bytes(int64_t(cls)));
  std::lock_guard<std::mutex> lock(c.mu);
  ++c.stats.malloc_count;
  count();
  return p;
}

void* allocate(size_t nbytes, Device device) {
  switch (device.type) {
    case DeviceType::cpu: return cpu_allocate(nbytes);
    case DeviceType::cuda: break;
  }
  no_gpu_backend("Storage", device);
}

void deallocate(void* ptr, size_t nbytes, Device device) {
  // Only CPU blocks are ever handed out (allocate refuses every other device).
  if (device.type == DeviceType::cpu) cpu_deallocate(ptr, nbytes);
}

void no_gpu_backend(const char* op, Device device) {
  KILN_FAIL(op, "this build has no GPU backend: {} tensors cannot be created, moved to or computed on "
            "(kiln was built with the CPU backend only)", device.str());
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

std::vector<Device> available_devices() { return {kCPU}; }

std::string format_bytes(int64_t nbytes) {
  static constexpr const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = double(nbytes);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} bytes", nbytes) : fmt::format("{:.3g} {}", v, kUnits[u]);
}

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
