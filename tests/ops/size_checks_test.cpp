// Checked size arithmetic (issue 23, item 1): a shape whose element count,
// strides or byte count overflow int64, a negative size, or an allocation the
// system cannot satisfy is a kiln::Error naming the op and the shape, never a
// wrapped size, a 0-byte block or a crash.
#include <cmath>
#include <limits>

#include "kiln/core/size_check.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

constexpr int64_t k2p40 = int64_t(1) << 40;
constexpr int64_t k2p62 = int64_t(1) << 62;

TEST(SizeChecks, CheckedNumel) {
  EXPECT_EQ(checked_numel("t", Shape{}), 1);
  EXPECT_EQ(checked_numel("t", Shape{2, 3, 4}), 24);
  EXPECT_EQ(checked_numel("t", Shape{2, 0, 4}), 0);
  EXPECT_EQ(checked_numel("t", Shape{k2p62, 1}), k2p62);
  EXPECT_KILN_ERROR(checked_numel("t", Shape{k2p40, k2p40}),
                    "[t] shape [1099511627776, 1099511627776] has more than 2^63 elements");
  EXPECT_KILN_ERROR(checked_numel("t", Shape{3, -2}), "[t] negative size -2 in shape [3, -2]");
  // No elements, but strides would overflow: still refused.
  EXPECT_KILN_ERROR(checked_numel("t", Shape{2, 0, k2p62, k2p62}), "[t] shape [2, 0, 4611686018427387904");
}

TEST(SizeChecks, CreationOpsRefuseOverflowingShapes) {
  // The probe: accepted, then indexing it crashed.
  EXPECT_KILN_ERROR(zeros({k2p40, k2p40}), "[zeros] shape [1099511627776, 1099511627776] has more than 2^63");
  EXPECT_KILN_ERROR(ones({k2p40, k2p40}), "[full] shape [1099511627776, 1099511627776]");
  EXPECT_KILN_ERROR(empty({k2p40, k2p40}), "[empty] shape [1099511627776, 1099511627776]");
  EXPECT_KILN_ERROR(full({k2p40, k2p40}, 1.0), "[full] shape");
  Generator gen(0);
  EXPECT_KILN_ERROR(randn({k2p40, k2p40}, gen), "[randn] shape [1099511627776, 1099511627776]");
  EXPECT_KILN_ERROR(rand({k2p40, k2p40}, gen), "[rand] shape");
  EXPECT_KILN_ERROR(randint(0, 3, {k2p40, k2p40}, gen), "[randint] shape");
  EXPECT_KILN_ERROR(eye(k2p40), "[eye] shape [1099511627776, 1099511627776]");
  // The element count fits, the byte count does not.
  EXPECT_KILN_ERROR(zeros({k2p62}), "[zeros] shape [4611686018427387904] of f32 has more than 2^63 bytes");
  EXPECT_KILN_ERROR(zeros({k2p62}, {.dtype = kF64}), "of f64 has more than 2^63 bytes");
  // Empty, but the strides of the non-zero dims overflow.
  EXPECT_KILN_ERROR(zeros({2, 0, k2p62, k2p62}), "[zeros] shape [2, 0, 4611686018427387904, 4611686018427387904]");
  EXPECT_KILN_ERROR(Tensor::empty({k2p40, k2p40}), "[empty] shape [1099511627776, 1099511627776]");
}

TEST(SizeChecks, NegativeSizesAreRefusedByName) {
  EXPECT_KILN_ERROR(zeros({2, -3}), "[zeros] negative size -3 in shape [2, -3]");
  EXPECT_KILN_ERROR(tensor<float>({1.f}, {-1, -1}), "[tensor] negative size -1 in shape [-1, -1]");
  float buf[4] = {};
  EXPECT_KILN_ERROR(from_blob(buf, {-2, -2}, kF32), "[from_blob] negative size -2 in shape [-2, -2]");
  EXPECT_KILN_ERROR(from_buffer(buf, {-4}, kF32), "[from_buffer] negative size -4 in shape [-4]");
}

TEST(SizeChecks, ArangeRefusesCountsThatDoNotFit) {
  EXPECT_KILN_ERROR(arange(0.0, 1e30, 1.0), "[arange] [0, 1e+30) in steps of 1 has 1e+30 elements, too many");
  EXPECT_KILN_ERROR(arange(0.0, std::numeric_limits<double>::infinity(), 1.0), "[arange] ");
  EXPECT_KILN_ERROR(arange(0.0, 1.0, std::numeric_limits<double>::quiet_NaN()), "[arange] ");
}

TEST(SizeChecks, ViewsRefuseOverflowingShapes) {
  Tensor s = scalar_tensor(1.0);
  EXPECT_KILN_ERROR(s.expand({k2p40, k2p40}), "[expand] shape [1099511627776, 1099511627776] has more than 2^63");
  Tensor e = zeros({0});
  EXPECT_KILN_ERROR(e.view({0, k2p62, k2p62}), "[view] shape [0, 4611686018427387904, 4611686018427387904]");
  EXPECT_KILN_ERROR(e.reshape({k2p62, k2p62, 0}), "[reshape] shape [4611686018427387904, 4611686018427387904, 0]");
  // The -1 is worked out from the product of the others, which overflows.
  Tensor x = zeros({4});
  EXPECT_KILN_ERROR(x.view({-1, k2p62, k2p62}), "[view] shape [-1, 4611686018427387904, 4611686018427387904]");
  EXPECT_KILN_ERROR(x.view({-1, -3}), "[view] ");
}

TEST(SizeChecks, BroadcastRefusesOverflowingResults) {
  Tensor s = scalar_tensor(1.0f);
  Tensor a = s.expand({k2p40, 1}), b = s.expand({1, k2p40});
  EXPECT_KILN_ERROR(a + b, "[add] shapes [1099511627776, 1] and [1, 1099511627776] broadcast to");
  EXPECT_KILN_ERROR(broadcast_shapes("op", Shape{k2p40, 1}, Shape{1, k2p40}), "has more than 2^63 elements");
}

TEST(SizeChecks, AllocationTheSystemCannotSatisfyIsAnError) {
  // 2^48 bytes (256 TiB): more than x86-64's user address space, so even with
  // overcommit on, malloc fails. (Under ASan, ASAN_OPTIONS needs
  // allocator_may_return_null=1, which the asan test preset sets.)
  reset_peak_memory_stats();
  const MemoryStats before = memory_stats();
  EXPECT_KILN_ERROR(zeros({int64_t(1) << 46}), "[zeros] cannot allocate 281474976710656 bytes (256 TiB) for shape");
  EXPECT_KILN_ERROR(zeros({int64_t(1) << 46}), "out of memory");
  EXPECT_EQ(memory_stats().current_bytes, before.current_bytes);  // nothing counted as handed out
  EXPECT_EQ(memory_stats().peak_bytes, before.peak_bytes);
  // The allocator itself never rounds a huge request down to a small block.
  EXPECT_KILN_ERROR(detail::cpu_allocate(std::numeric_limits<size_t>::max()), "[allocate] ");
  EXPECT_KILN_ERROR(detail::cpu_allocate(std::numeric_limits<size_t>::max() - (1 << 19)), "[allocate] ");
  EXPECT_EQ(memory_stats().current_bytes, before.current_bytes);
}

TEST(SizeChecks, LargeValidShapesStillWork) {
  Tensor t = zeros({0, k2p40, 1 << 20});  // empty, strides fit
  EXPECT_EQ(t.numel(), 0);
  Tensor v = scalar_tensor(2.0f).expand({k2p40, 8});  // a view of one element
  EXPECT_EQ(v.numel(), k2p40 * 8);
  EXPECT_EQ(sum(v.select(0, k2p40 - 1)).item<float>(), 16.f);
}

}  // namespace
}  // namespace kiln
