// DType: sizes, names, PyTorch's promotion table (golden), bfloat16 rounding
// and dispatch.
#include <cmath>
#include <limits>

#include "kiln/core/bfloat16.h"
#include "kiln/core/dtype.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

constexpr DType kAll[] = {kBool, kU8, kI32, kI64, kBF16, kF32, kF64};

TEST(DType, ItemsizeAndNames) {
  const int64_t sizes[] = {1, 1, 4, 8, 2, 4, 8};
  const char* names[] = {"bool", "u8", "i32", "i64", "bf16", "f32", "f64"};
  for (size_t i = 0; i < std::size(kAll); ++i) {
    EXPECT_EQ(itemsize(kAll[i]), sizes[i]) << names[i];
    EXPECT_EQ(name(kAll[i]), names[i]);
  }
  static_assert(itemsize(kBF16) == sizeof(bfloat16));
}

TEST(DType, Kinds) {
  EXPECT_TRUE(is_floating(kBF16) && is_floating(kF32) && is_floating(kF64));
  EXPECT_FALSE(is_floating(kI64) || is_floating(kBool) || is_floating(kU8));
  EXPECT_TRUE(is_integral(kU8) && is_integral(kI32) && is_integral(kI64));
  EXPECT_FALSE(is_integral(kBool) || is_integral(kF32));
}

TEST(DType, PromotionMatchesTorch) {
  const auto& table = testing::golden("core").at("promote");
  int checked = 0;
  for (DType a : kAll) {
    for (DType b : kAll) {
      std::string key = std::string(name(a)) + "," + std::string(name(b));
      EXPECT_EQ(name(promote_types(a, b)), table.at(key).get<std::string>()) << key;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 49);
}

TEST(DType, PromotionSpotChecks) {
  EXPECT_EQ(promote_types(kBF16, kI64), kBF16);  // bf16 with an integer stays bf16
  EXPECT_EQ(promote_types(kBF16, kF32), kF32);
  EXPECT_EQ(promote_types(kU8, kBool), kU8);
  EXPECT_EQ(promote_types(kI32, kU8), kI32);
  EXPECT_EQ(promote_types(kF64, kBool), kF64);
}

TEST(DType, CppTypeMapping) {
  static_assert(dtype_v<float> == kF32 && dtype_v<const double> == kF64 && dtype_v<bfloat16> == kBF16);
  static_assert(dtype_v<int64_t> == kI64 && dtype_v<int32_t> == kI32 && dtype_v<uint8_t> == kU8);
  static_assert(std::is_same_v<acc_t<bfloat16>, float> && std::is_same_v<acc_t<int32_t>, int32_t>);
  for (DType t : kAll) {
    int64_t size = dispatch(t, [](auto tag) { return int64_t(sizeof(typename decltype(tag)::type)); });
    EXPECT_EQ(size, itemsize(t)) << name(t);
    DType back = dispatch(t, [](auto tag) { return dtype_v<typename decltype(tag)::type>; });
    EXPECT_EQ(back, t);
  }
}

TEST(BFloat16, RoundsToNearestEvenLikeTorch) {
  const auto& g = testing::golden("core");
  // Values are numbers or "inf"/"-inf"; golden_values parses both.
  std::vector<double> values = testing::golden_values(g.at("bf16_in"));
  auto bits = g.at("bf16_bits").get<std::vector<int64_t>>();
  ASSERT_EQ(values.size(), bits.size());
  for (size_t i = 0; i < values.size(); ++i)
    EXPECT_EQ(bfloat16(float(values[i])).bits, uint16_t(bits[i])) << "value " << values[i];
}

TEST(BFloat16, TiesAndRoundTrip) {
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even one (1).
  EXPECT_EQ(bfloat16(1.00390625f).bits, 0x3f80);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6.
  EXPECT_EQ(bfloat16(1.01171875f).bits, 0x3f82);
  // Every bf16 value survives a float round trip.
  for (uint32_t b = 0; b < 0x10000; b += 7) {
    bfloat16 x = bfloat16::from_bits(uint16_t(b));
    float f = x;
    if (std::isnan(f)) continue;
    EXPECT_EQ(bfloat16(f).bits, x.bits);
  }
}

TEST(BFloat16, NanStaysNanAndInfStaysInf) {
  float qnan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(float(bfloat16(qnan))));
  // A NaN whose payload sits only in the low bits must not round to infinity.
  uint32_t u = 0x7f800001u;
  float snan;
  std::memcpy(&snan, &u, sizeof snan);
  EXPECT_TRUE(std::isnan(float(bfloat16(snan))));
  EXPECT_TRUE(std::isnan(float(bfloat16(-qnan))));
  EXPECT_EQ(float(bfloat16(INFINITY)), INFINITY);
  EXPECT_EQ(float(bfloat16(-INFINITY)), -INFINITY);
  // The largest finite floats overflow to infinity when rounded.
  EXPECT_EQ(float(bfloat16(std::numeric_limits<float>::max())), INFINITY);
}

}  // namespace
}  // namespace kiln
