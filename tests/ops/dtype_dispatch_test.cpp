// The kernels' dtype dispatch (src/backend/cpu/dispatch.h over kiln::dispatch):
// every dtype reaches the C++ type of its own, dispatch_only runs only for the
// types it lists and names the op for any other dtype.
#include <string>
#include <type_traits>

#include "src/backend/cpu/dispatch.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using backend::cpu::dispatch_only;

TEST(DtypeDispatch, EveryDtypeGetsItsOwnType) {
  for (DType t : {kBool, kU8, kI32, kI64, kBF16, kF32, kF64}) {
    const DType back = dispatch(t, [](auto tag) { return dtype_v<typename decltype(tag)::type>; });
    EXPECT_EQ(back, t) << name(t);
  }
}

TEST(DtypeDispatch, RestrictedToTheListedTypes) {
  // The floating kernels' list: bf16, f32 and f64 reach fn with their types.
  for (DType t : {kBF16, kF32, kF64}) {
    const size_t size = dispatch_only<bfloat16, float, double>(
        t, [](auto tag) { return sizeof(typename decltype(tag)::type); }, "my_kernel");
    EXPECT_EQ(int64_t(size), itemsize(t)) << name(t);
  }
  // The index kernels' list.
  int calls = 0;
  dispatch_only<int32_t, int64_t>(kI32, [&](auto tag) {
    EXPECT_TRUE((std::is_same_v<typename decltype(tag)::type, int32_t>));
    ++calls;
  });
  EXPECT_EQ(calls, 1);
}

TEST(DtypeDispatch, AnUnlistedDtypeNamesTheOp) {
  int calls = 0;
  auto count = [&](auto) { ++calls; };
  EXPECT_KILN_ERROR((dispatch_only<float, double>(kBF16, count, "flash_attention")),
                    "[flash_attention] dtype bf16 is not supported by this kernel");
  EXPECT_KILN_ERROR((dispatch_only<int32_t, int64_t>(kF32, count, "gather")), "[gather] dtype f32");
  EXPECT_KILN_ERROR((dispatch_only<float>(kI64, count)), "[dispatch] dtype i64");
  EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace kiln
