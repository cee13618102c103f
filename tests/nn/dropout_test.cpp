// Dropout: no PyTorch parity (another RNG); checks the semantics instead: eval
// and p = 0 are the identity, p = 1 zeros, the mean is kept, the mask replays
// from the seed or the Rngs stream, and the gradient is mask / (1 - p).
#include "kiln/nn/dropout.h"

#include <gtest/gtest.h>

#include "tests/nn/layer_testing.h"

namespace kiln::nn {
namespace {
using namespace testing;

TEST(DropoutLayer, EvalAndZeroPAreIdentityOneIsZeros) {
  Tensor x = leaf({4, 5}, 1);
  Dropout d(0.3);
  d.eval();
  EXPECT_TRUE(equal(d.forward(x), x));
  Rngs rngs{{"dropout", 3}};
  EXPECT_TRUE(equal(d.forward(x, rngs), x));
  EXPECT_EQ(rngs.state().at("dropout").count, 0u);  // eval draws nothing
  Dropout zero(0.0);
  EXPECT_TRUE(equal(zero.forward(x), x));
  Dropout all(1.0);
  EXPECT_TRUE(equal(all.forward(x).detach(), zeros({4, 5}, {.dtype = kF64})));
}

TEST(DropoutLayer, KeepsTheMeanAndDropsAboutP) {
  Dropout d(0.25, 7);
  Tensor x = ones({200, 500});
  Tensor y = d.forward(x);
  const double kept = mean(ne(y, 0).to(kF32)).item<float>();
  EXPECT_NEAR(kept, 0.75, 0.01);  // 100k Bernoulli draws: sd 0.0014
  EXPECT_NEAR(mean(y).item<float>(), 1.0, 0.015);
  // Kept elements are scaled by 1 / (1 - p).
  EXPECT_NEAR(max(y).item<float>(), 1.0 / 0.75, 1e-6);
}

TEST(DropoutLayer, MaskReplaysFromSeedAndGenerator) {
  Tensor x = ones({8, 16});
  Dropout a(0.5, 42), b(0.5, 42), c(0.5, 43);
  Tensor ya = a.forward(x);
  EXPECT_TRUE(equal(ya, b.forward(x)));
  EXPECT_FALSE(equal(ya, c.forward(x)));
  // The generator advances: the next mask differs; restoring its state replays it.
  GeneratorState s = a.generator().state();
  Tensor y2 = a.forward(x);
  EXPECT_FALSE(equal(ya, y2));
  a.generator().set_state(s);
  EXPECT_TRUE(equal(a.forward(x), y2));
  // forward is const: through a const reference the same stream advances.
  const Dropout& ca = a;
  a.generator().set_state(s);
  EXPECT_TRUE(equal(ca.forward(x), y2));
  EXPECT_FALSE(equal(ca.forward(x), y2));
  // The Rngs form draws rngs.next("dropout"): same stream seed, same mask.
  Rngs r1{{"dropout", 5}}, r2{{"dropout", 5}};
  Tensor m1 = a.forward(x, r1);
  EXPECT_TRUE(equal(m1, a.forward(x, r2)));
  EXPECT_FALSE(equal(m1, a.forward(x, r1)));  // the stream advanced
  Rngs params_only(0);
  EXPECT_KILN_ERROR(a.forward(x, params_only), "no stream named 'dropout'");
}

// Built from the model's Init, each Dropout gets its own generator: two layers'
// masks differ, and the same seed rebuilds the same model's masks.
TEST(DropoutLayer, InitGivesEachLayerItsOwnGenerator) {
  Tensor x = ones({8, 16});
  Rngs rngs{{"params", 0}, {"dropout", 7}};
  Dropout a(0.5, rngs), b(0.5, rngs);
  Tensor ya = a.forward(x);
  EXPECT_FALSE(equal(ya, b.forward(x)));
  EXPECT_EQ(rngs.state().at("dropout").count, 2u);
  EXPECT_EQ(rngs.state().at("params").count, 0u);
  Rngs again{{"params", 0}, {"dropout", 7}};
  Dropout a2(0.5, again);
  EXPECT_TRUE(equal(a2.forward(x), ya));
  Rngs params_only(3);
  Dropout c(0.5, params_only);  // no "dropout" stream: drawn from "params"
  EXPECT_EQ(params_only.state().at("params").count, 1u);
}

TEST(DropoutLayer, GradientIsMaskOverKeep) {
  Dropout d(0.4, 9);
  Tensor x = leaf({6, 7}, 2);
  Tensor y = d.forward(x);
  backward({sum(y)});
  // Where kept: y = x / 0.6 and the grad is 1 / 0.6; where dropped both are 0.
  Tensor kept = ne(y.detach(), 0).to(kF64);
  EXPECT_TRUE(all_close(x.grad(), kept / 0.6, 1e-12, 1e-12));
  // Gradcheck with the same mask every call (a fresh stream per call).
  EXPECT_GRADCHECK(
      [&](const std::vector<Tensor>& in) {
        Rngs rngs{{"dropout", 11}};
        return d.forward(in[0], rngs);
      },
      {noncontiguous(leaf({3, 4}, 3))});
}

TEST(DropoutLayer, ReprAndErrors) {
  EXPECT_EQ(Dropout(0.1).repr(), "Dropout(p=0.1)");
  EXPECT_KILN_ERROR(Dropout(1.5), "[Dropout] p must be in [0, 1], got 1.5");
  EXPECT_KILN_ERROR(Dropout(-0.1), "[Dropout] p must be in [0, 1], got -0.1");
  Dropout d(0.5);
  EXPECT_KILN_ERROR(d.forward(ones({2}, {.dtype = kI64})), "[Dropout] input [2] has dtype i64, expected a floating dtype");
}

}  // namespace
}  // namespace kiln::nn
