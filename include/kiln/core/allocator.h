// The caching CPU allocator: 64-byte aligned blocks, reused by size class so a
// training loop stops calling malloc after its first step.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln {

struct MemoryStats {
  int64_t current_bytes = 0;  // handed out and not yet returned
  int64_t peak_bytes = 0;     // max of current_bytes since start or reset_peak_memory_stats()
  int64_t cached_bytes = 0;   // returned blocks kept for reuse
  int64_t alloc_count = 0;    // allocate() calls
  int64_t malloc_count = 0;   // of those, the ones that reached the system allocator
};

/// Counters of the CPU allocator.
MemoryStats memory_stats();
/// Returns every cached block to the system.
void empty_cache();
/// Sets peak_bytes to current_bytes.
void reset_peak_memory_stats();

namespace detail {
/// A block of at least nbytes, 64-byte aligned. nbytes 0 gives a valid pointer.
void* cpu_allocate(size_t nbytes);
/// Returns a block of nbytes from cpu_allocate for reuse.
void cpu_deallocate(void* ptr, size_t nbytes);
}  // namespace detail

}  // namespace kiln
