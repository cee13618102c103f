// Linear, activations, Flatten and Sequential against PyTorch (tests/goldens/nn_basic.json).
#include "kiln/nn/linear.h"

#include <gtest/gtest.h>

#include "tests/nn/layer_testing.h"
#include "tests/nn/parity.h"

namespace kiln::nn {
namespace {
using namespace testing;

TEST(Linear, MatchesPyTorch) {
  Rngs rngs(0);
  Linear lin(5, 3, rngs);
  expect_parity(lin, parity_case("nn_basic", "linear"), [&](const auto& in) { return std::vector{lin.forward(in[0])}; });
  Linear no_bias(5, 3, rngs, false);
  expect_parity(no_bias, parity_case("nn_basic", "linear_3d_no_bias"),
                [&](const auto& in) { return std::vector{no_bias.forward(in[0])}; });
}

TEST(Linear, SequentialOfActivationsMatchesPyTorch) {
  Rngs rngs(0);
  Sequential mlp(Linear(6, 8, rngs), ReLU(), Linear(8, 8, rngs), GELU(), Linear(8, 8, rngs), Tanh(),
                 Linear(8, 8, rngs), Sigmoid(), Linear(8, 8, rngs), SiLU(), Linear(8, 2, rngs));
  expect_parity(mlp, parity_case("nn_basic", "mlp"), [&](const auto& in) { return std::vector{mlp.forward(in[0])}; });
  Sequential flat(Flatten(), Linear(12, 2, rngs));
  expect_parity(flat, parity_case("nn_basic", "flatten"), [&](const auto& in) { return std::vector{flat.forward(in[0])}; });
}

TEST(Linear, GradcheckThroughTheModule) {
  Rngs rngs(0);
  Linear lin(4, 3, f64_init(rngs));
  expect_module_gradcheck(lin, leaf({2, 4}, 1));
}

TEST(Linear, BadInputNamesShapes) {
  Rngs rngs(0);
  Linear lin(784, 256, rngs);
  EXPECT_KILN_ERROR(lin.forward(ones({32, 780})), "[linear] input [32, 780] does not match weight [256, 784] (in_features 784)");
  EXPECT_KILN_ERROR(Linear(0, 3, rngs), "[Linear] in_features 0 and out_features 3 must be positive");
}

}  // namespace
}  // namespace kiln::nn
