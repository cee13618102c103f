// Upsample against torch.nn.Upsample (tests/goldens/nn_basic.json).
#include "kiln/nn/upsample.h"

#include <gtest/gtest.h>

#include "tests/nn/parity.h"

namespace kiln::nn {
namespace {
using namespace testing;

TEST(Upsample, MatchesPyTorch) {
  Upsample nearest({.scale_factor = {2}});
  expect_parity(nearest, parity_case("nn_basic", "upsample_nearest"),
                [&](const auto& in) { return std::vector{nearest.forward(in[0])}; });
  Upsample bilinear({.size = {5, 4}, .mode = InterpolateMode::Bilinear, .align_corners = true});
  expect_parity(bilinear, parity_case("nn_basic", "upsample_bilinear"),
                [&](const auto& in) { return std::vector{bilinear.forward(in[0])}; });
  EXPECT_EQ(bilinear.repr(), "Upsample(size=[5, 4], mode='bilinear', align_corners=true)");
}

TEST(Upsample, GradcheckAndErrors) {
  Upsample up({.scale_factor = {1.5}, .mode = InterpolateMode::Bilinear});
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return up.forward(in[0]); }, {leaf({1, 2, 3, 2}, 4)});
  EXPECT_KILN_ERROR(Upsample({}), "[Upsample] give exactly one of size and scale_factor");
  EXPECT_KILN_ERROR(Upsample({.size = {2, 2}, .scale_factor = {2}}), "[Upsample] give exactly one");
  EXPECT_KILN_ERROR(Upsample({.scale_factor = {2}}).forward(ones({4, 4})), "[interpolate]");
}

}  // namespace
}  // namespace kiln::nn
