// MaxPool, AvgPool, AdaptiveAvgPool layers against PyTorch
// (tests/goldens/nn_layers_pool.json), gradchecks, errors.
#include "kiln/nn/pool.h"

#include <gtest/gtest.h>

#include "tests/nn/layer_testing.h"
#include "tests/nn/parity.h"

namespace kiln::nn {
namespace {
using namespace testing;

template <class M>
void parity(M& m, const char* name) {
  SCOPED_TRACE(name);
  expect_parity(m, parity_case("nn_layers_pool", name), [&](const auto& in) { return std::vector{m.forward(in[0])}; });
}

TEST(PoolLayers, MatchPyTorch) {
  MaxPool2d a(2);
  parity(a, "max_pool2d");
  MaxPool2d b(3, 2, 1);
  parity(b, "max_pool2d_stride_pad");
  AvgPool2d c(2);
  parity(c, "avg_pool2d");
  AvgPool2d d(3, 2, 1, false, /*count_include_pad=*/false);
  parity(d, "avg_pool2d_exclude_pad");
  AdaptiveAvgPool2d e({1, 1});
  parity(e, "adaptive_avg_pool2d_global");
  AdaptiveAvgPool2d f({3, 2});
  parity(f, "adaptive_avg_pool2d_3x2");
  MaxPool1d g(3, 2, 1);
  parity(g, "max_pool1d");
  AvgPool1d h(2);
  parity(h, "avg_pool1d");
  AdaptiveAvgPool1d i(3);
  parity(i, "adaptive_avg_pool1d");
}

TEST(PoolLayers, StrideDefaultsToKernelAndShapes) {
  MaxPool2d p(2);
  EXPECT_EQ(p.stride.h, 2);
  EXPECT_EQ(MaxPool2d(3, std::nullopt).stride.w, 3);
  EXPECT_EQ(AvgPool2d(Size2{2, 3}).stride.w, 3);
  EXPECT_EQ(MaxPool2d(3, Size2{2, 1}).stride.w, 1);
  EXPECT_EQ(AvgPool1d(4).stride, 4);
  EXPECT_EQ(p.forward(ones({4, 3, 28, 28})).shape(), (Shape{4, 3, 14, 14}));
  EXPECT_EQ(AvgPool2d(Size2{2, 3}).forward(ones({3, 8, 9})).shape(), (Shape{3, 4, 3}));  // unbatched
  EXPECT_EQ(AdaptiveAvgPool2d({1, 1}).forward(ones({2, 5, 7, 3})).shape(), (Shape{2, 5, 1, 1}));
  EXPECT_EQ(MaxPool1d(3).forward(ones({2, 3, 10})).shape(), (Shape{2, 3, 3}));
}

TEST(PoolLayers, Gradcheck) {
  MaxPool2d mp(2, 1);
  expect_module_gradcheck(mp, noncontiguous(leaf({1, 2, 3, 3}, 1)));
  AvgPool2d ap(3, 2, 1, false, false);
  expect_module_gradcheck(ap, leaf({1, 1, 5, 4}, 2));
  AdaptiveAvgPool2d ad({2, 3});
  expect_module_gradcheck(ad, leaf({1, 2, 3, 5}, 3));
  MaxPool1d mp1(2);
  expect_module_gradcheck(mp1, leaf({2, 1, 6}, 4));
  AvgPool1d ap1(3, 1, 1);
  expect_module_gradcheck(ap1, leaf({1, 2, 5}, 5));
  AdaptiveAvgPool1d ad1(2);
  expect_module_gradcheck(ad1, leaf({1, 2, 5}, 6));
}

TEST(PoolLayers, Repr) {
  EXPECT_EQ(MaxPool2d(2).repr(), "MaxPool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1), ceil_mode=false)");
  EXPECT_EQ(AdaptiveAvgPool2d({1, 1}).repr(), "AdaptiveAvgPool2d(output_size=(1, 1))");
  EXPECT_EQ(AvgPool1d(3, 2).repr(), "AvgPool1d(kernel_size=(3,), stride=(2,), padding=(0,), ceil_mode=false, count_include_pad=true)");
}

TEST(PoolLayers, BadArgumentsAndInputs) {
  EXPECT_KILN_ERROR(MaxPool2d(0), "[MaxPool2d] kernel_size must be positive, got 0");
  EXPECT_KILN_ERROR(MaxPool2d(2, 2, 2), "[MaxPool2d] padding 2 must be between 0 and half of kernel_size 2");
  EXPECT_KILN_ERROR(MaxPool2d(2, Size2{0, 1}), "[MaxPool2d] stride must be positive (std::nullopt for kernel_size), got 0");
  EXPECT_KILN_ERROR(AvgPool1d(3, -1), "[AvgPool1d] stride must be positive (std::nullopt for kernel_size), got -1");
  // 0 no longer stands for "the kernel size": std::nullopt does.
  EXPECT_KILN_ERROR(MaxPool1d(3, 0), "[MaxPool1d] stride must be positive (std::nullopt for kernel_size), got 0");
  EXPECT_KILN_ERROR(AvgPool2d(2, 0), "[AvgPool2d] stride must be positive (std::nullopt for kernel_size), got 0");
  EXPECT_KILN_ERROR(MaxPool1d(3, 1, 0, 0), "[MaxPool1d] dilation must be positive, got 0");
  EXPECT_KILN_ERROR(AdaptiveAvgPool2d({0, 1}), "[AdaptiveAvgPool2d] output_size (0, 1) must be positive");
  EXPECT_KILN_ERROR(AdaptiveAvgPool1d(-2), "[AdaptiveAvgPool1d] output_size must be positive, got -2");
  EXPECT_KILN_ERROR(MaxPool2d(2).forward(ones({4, 4})), "[MaxPool2d] input [4, 4] must be [B, C, H, W] or [C, H, W]");
  EXPECT_KILN_ERROR(AvgPool1d(2).forward(ones({1, 2, 4, 4})), "[AvgPool1d] input [1, 2, 4, 4] must be [B, C, L] or [C, L]");
  EXPECT_KILN_ERROR(AdaptiveAvgPool2d({1, 1}).forward(ones({5})), "[AdaptiveAvgPool2d] input [5] must be");
  // Windows larger than the input: the op's check.
  EXPECT_KILN_ERROR(MaxPool2d(5).forward(ones({1, 1, 3, 3})), "[MaxPool2d] [max_pool2d] input [1, 1, 3, 3] is too small for kernel_size");
}

}  // namespace
}  // namespace kiln::nn
