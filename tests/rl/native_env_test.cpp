// The helpers of kiln's native environments (src/rl/native_env.h):
// python_square and python_squares against glibc's pow(v, 2.0), bit for bit.
#include "src/rl/native_env.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/support/rl_testing.h"

namespace kiln::rl::detail {
namespace {

// glibc's pow through a pointer the compiler cannot see through, so that
// pow(v, 2.0) here is not folded into v * v.
double (*volatile glibc_pow)(double, double) = ::pow;

TEST(PythonSquare, IsGlibcsPowBitForBit) {
  Generator gen(0);
  // Magnitudes from 1e-300 to 1e300, and the physics' own range, both signs.
  const std::vector<double> u = rand({1 << 18}, gen, {.dtype = kF64}).to_vector<double>();
  std::vector<double> v(u.size()), block(u.size());
  for (size_t i = 0; i < u.size(); ++i) v[i] = i % 2 ? std::ldexp(u[i] - 0.5, int(i % 1993) - 996) : (u[i] - 0.5) * 20;
  python_squares(v.data(), block.data(), int64_t(v.size()));
  int64_t differ_from_product = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const double ref = glibc_pow(v[i], 2.0);
    ASSERT_EQ(python_square(v[i]), ref) << std::hexfloat << v[i];
    ASSERT_EQ(block[i], ref) << std::hexfloat << v[i];
    differ_from_product += ref != v[i] * v[i];
  }
  EXPECT_GT(differ_from_product, 100);  // the cases where v * v would be wrong were met
  for (double v : {0.0, -0.0, 1.0, -1.0, 2.0, 0.5, 0x1p-600, 0x1p-540, 0x1p520, 1e-320, 1e200,
                   std::numeric_limits<double>::infinity(), std::nan("")}) {
    const double ref = glibc_pow(v, 2.0);
    EXPECT_TRUE(python_square(v) == ref || (std::isnan(ref) && std::isnan(python_square(v)))) << v;
  }
}

}  // namespace
}  // namespace kiln::rl::detail
