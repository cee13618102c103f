// nn::LayerNorm with LayerNormOptions: bias = false (PyTorch >= 2.1's
// LayerNorm(bias=False)): weight only, no "bias" key, the op without a shift.
#include <gtest/gtest.h>

#include "kiln/nn/norm.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/random.h"
#include "tests/support/nn_testing.h"

namespace kiln::nn {
namespace {

TEST(LayerNormOptions, NoBias) {
  LayerNorm ln(Shape{6}, LayerNormOptions{.eps = 1e-6, .bias = false});
  EXPECT_TRUE(ln.weight.defined());
  EXPECT_FALSE(ln.bias.defined());
  EXPECT_EQ(ln.num_parameters(), 6);
  StateDict sd = ln.state_dict();
  EXPECT_EQ(sd.size(), 1u);
  EXPECT_EQ(sd.begin()->first, "weight");
  EXPECT_EQ(ln.repr(), "LayerNorm((6,), eps=1e-06, elementwise_affine=true, bias=false)");
  Generator g(0);
  Tensor x = randn({3, 6}, g), w = randn({6}, g);
  ln.load_state_dict(StateDict{{"weight", w}});
  EXPECT_TRUE(allclose(ln.forward(x), layer_norm(x, {6}, w, Tensor(), 1e-6)));
  // A state dict with a bias is refused (strict), as PyTorch does.
  EXPECT_KILN_ERROR(ln.load_state_dict(StateDict{{"weight", w}, {"bias", w}}), "bias");
}

TEST(LayerNormOptions, DefaultsMatchTheOldConstructor) {
  Rngs rngs(0);
  LayerNorm a(Shape{4}, rngs, LayerNormOptions{});
  LayerNorm b(Shape{4});
  EXPECT_EQ(a.repr(), b.repr());
  EXPECT_TRUE(a.bias.defined());
  LayerNorm none(Shape{4}, LayerNormOptions{.elementwise_affine = false, .bias = false});
  EXPECT_EQ(none.num_parameters(), 0);
  EXPECT_EQ(none.repr(), "LayerNorm((4,), eps=1e-05, elementwise_affine=false)");
}

}  // namespace
}  // namespace kiln::nn
