// The caching allocator: byte counters, block reuse, empty_cache, alignment.
#include "kiln/core/allocator.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

TEST(Allocator, CurrentAndPeakFollowTensors) {
  MemoryStats s0 = memory_stats();
  {
    Tensor a = Tensor::empty({1000});  // 4000 bytes -> 4096-byte class
    MemoryStats s1 = memory_stats();
    EXPECT_EQ(s1.current_bytes - s0.current_bytes, 4096);
    EXPECT_GE(s1.peak_bytes, s1.current_bytes);
    EXPECT_EQ(s1.alloc_count - s0.alloc_count, 1);
    Tensor v = Tensor::make_view(a.storage(), {10, 100}, {100, 1}, 0, kF32);  // views allocate nothing
    EXPECT_EQ(memory_stats().current_bytes, s1.current_bytes);
  }
  MemoryStats s2 = memory_stats();
  EXPECT_EQ(s2.current_bytes, s0.current_bytes);
  EXPECT_GE(s2.cached_bytes, 4096);
}

TEST(Allocator, PeakResets) {
  reset_peak_memory_stats();
  MemoryStats s0 = memory_stats();
  EXPECT_EQ(s0.peak_bytes, s0.current_bytes);
  { Tensor big = Tensor::empty({1 << 18}, kF64); }  // 2 MiB, freed at once
  MemoryStats s1 = memory_stats();
  EXPECT_EQ(s1.current_bytes, s0.current_bytes);
  EXPECT_EQ(s1.peak_bytes, s0.current_bytes + (2 << 20));
  reset_peak_memory_stats();
  EXPECT_EQ(memory_stats().peak_bytes, s1.current_bytes);
}

TEST(Allocator, SizeClasses) {
  auto grow = [](int64_t nbytes) {
    int64_t before = memory_stats().current_bytes;
    Tensor t = Tensor::empty({nbytes}, kU8);
    return memory_stats().current_bytes - before;
  };
  EXPECT_EQ(grow(1), 64);
  EXPECT_EQ(grow(64), 64);
  EXPECT_EQ(grow(65), 128);
  EXPECT_EQ(grow(100), 128);
  EXPECT_EQ(grow(5000), 8192);
  EXPECT_EQ(grow((1 << 20) + 1), 2 << 20);  // whole MiBs above 1 MiB
  EXPECT_EQ(grow(0), 64);
}

TEST(Allocator, BlocksAreReused) {
  { Tensor warm = Tensor::empty({12345}); }
  MemoryStats s0 = memory_stats();
  void* first = nullptr;
  for (int i = 0; i < 100; ++i) {
    Tensor t = Tensor::empty({12345});
    if (i == 0) first = t.data_ptr();
    EXPECT_EQ(t.data_ptr(), first);  // the same cached block every time
  }
  MemoryStats s1 = memory_stats();
  EXPECT_EQ(s1.malloc_count, s0.malloc_count);
  EXPECT_EQ(s1.alloc_count - s0.alloc_count, 100);
  EXPECT_EQ(s1.current_bytes, s0.current_bytes);
}

TEST(Allocator, EmptyCacheFreesCachedBytes) {
  { Tensor t = Tensor::empty({3, 1 << 16}); }
  EXPECT_GT(memory_stats().cached_bytes, 0);
  int64_t current = memory_stats().current_bytes;
  empty_cache();
  MemoryStats s = memory_stats();
  EXPECT_EQ(s.cached_bytes, 0);
  EXPECT_EQ(s.current_bytes, current);
  // The next allocation of that size reaches the system allocator again.
  int64_t mallocs = s.malloc_count;
  { Tensor t = Tensor::empty({3, 1 << 16}); }
  EXPECT_EQ(memory_stats().malloc_count, mallocs + 1);
}

TEST(Allocator, SixtyFourByteAlignment) {
  std::vector<Tensor> keep;
  for (int64_t n : {1, 3, 7, 63, 65, 1000, 4097, (1 << 20) + 3})
    for (DType dt : {kU8, kBF16, kF32, kF64}) {
      keep.push_back(Tensor::empty({n}, dt));
      EXPECT_EQ(reinterpret_cast<uintptr_t>(keep.back().data_ptr()) % 64, 0u) << n << " " << name(dt);
    }
}

}  // namespace
}  // namespace kiln
