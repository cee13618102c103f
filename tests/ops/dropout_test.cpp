// Tests of dropout: identity and all-zero edge cases, the kept fraction
// against the binomial spread, reproducibility from the generator state,
// thread-count independence, the gradient (the same scaled mask), gradcheck
// with a replayed generator, and error messages.
#include <cmath>

#include "kiln/ops/dropout.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;

TEST(Dropout, IdentityWhenNotTrainingOrPZero) {
  Generator gen(1);
  Tensor x = ones({3, 4});
  EXPECT_TRUE(dropout(x, 0.5, false, gen).is_same(x));
  EXPECT_TRUE(dropout(x, 0.0, true, gen).is_same(x));
  EXPECT_EQ(gen.offset(), 0u) << "no randomness consumed";
}

TEST(Dropout, AllZerosWhenPOne) {
  Generator gen(1);
  Tensor x = ones({3, 4});
  x.requires_grad_(true);
  Tensor y = dropout(x, 1.0, true, gen);
  EXPECT_TRUE(equal(y, zeros({3, 4})));
  sum(y).backward();
  EXPECT_TRUE(equal(x.grad(), zeros({3, 4})));
}

TEST(Dropout, KeptFractionAndScale) {
  for (double p : {0.1, 0.5, 0.8}) {
    SCOPED_TRACE(p);
    Generator gen(42);
    const int64_t n = 1 << 20;
    Tensor y = dropout(ones({n}), p, true, gen);
    // Every element is 0 or 1 / (1 - p).
    const float scale = float(1.0 / (1.0 - p));
    EXPECT_EQ(sum(logical_or(eq(y, 0.0), eq(y, scale))).item<int64_t>(), n);
    const double kept = double(sum(ne(y, 0.0)).item<int64_t>()) / double(n);
    const double sd = std::sqrt(p * (1 - p) / double(n));
    EXPECT_NEAR(kept, 1 - p, 5 * sd);
    // Inverted scaling keeps the mean: E[y] = 1.
    EXPECT_NEAR(mean(y).item<float>(), 1.0, 5 * sd * scale);
  }
}

TEST(Dropout, ReproducibleFromGeneratorState) {
  Generator gen(7);
  Tensor x = ones({64, 33});
  const GeneratorState s = gen.state();
  Tensor a = dropout(x, 0.3, true, gen);
  Tensor b = dropout(x, 0.3, true, gen);
  EXPECT_FALSE(equal(a, b)) << "successive calls draw fresh masks";
  gen.set_state(s);
  EXPECT_TRUE(equal(dropout(x, 0.3, true, gen), a));
  EXPECT_TRUE(equal(dropout(x, 0.3, true, gen), b));
}

TEST(Dropout, SameMaskForAnyThreadCount) {
  const int saved = get_num_threads();
  Tensor x = ones({1000, 257});
  set_num_threads(1);
  Generator g1(9);
  Tensor a = dropout(x, 0.4, true, g1);
  set_num_threads(2);
  Generator g2(9);
  Tensor b = dropout(x, 0.4, true, g2);
  set_num_threads(saved);
  EXPECT_TRUE(equal(a, b));
}

TEST(Dropout, GradientIsTheScaledMask) {
  Generator gen(3), data(4);
  Tensor x = add(rand({50, 20}, data), 0.5);  // nonzero everywhere, so y != 0 exactly where kept
  x.requires_grad_(true);
  Tensor y = dropout(x, 0.25, true, gen);
  Tensor g = randn({50, 20}, data);
  y.backward(g);
  Tensor mask = to(ne(y.detach(), 0.0), kF32);
  EXPECT_TRUE(all_close(x.grad(), g * mask / 0.75, 1e-6, 1e-6));
  EXPECT_TRUE(all_close(y.detach(), x.detach() * mask / 0.75, 1e-6, 1e-6));
  EXPECT_GT(sum(mask).item<float>(), 0.0f);
  EXPECT_LT(sum(mask).item<float>(), 1000.0f);
}

TEST(Dropout, Gradcheck) {
  for (bool nc : {false, true}) {
    Tensor x = testing::leaf({6, 5}, 11);
    if (nc) x = testing::noncontiguous(x);
    Generator gen(5);
    const GeneratorState s = gen.state();
    // Replay the same mask on every evaluation.
    EXPECT_GRADCHECK(
        [&](const std::vector<Tensor>& in) {
          gen.set_state(s);
          return dropout(in[0], 0.4, true, gen);
        },
        {x});
  }
}

TEST(Dropout, Bf16AndF64) {
  Generator g1(2), g2(2);
  Tensor a = dropout(ones({100}, {.dtype = kBF16}), 0.5, true, g1);
  Tensor b = dropout(ones({100}, {.dtype = kF64}), 0.5, true, g2);
  EXPECT_EQ(a.dtype(), kBF16);
  EXPECT_TRUE(equal(to(a, kF64), b)) << "same words, same mask in every dtype";
}

TEST(DropoutErrors, Messages) {
  Generator gen(1);
  EXPECT_KILN_ERROR(dropout(ones({2}), 1.5, true, gen), "[dropout] probability p must be in [0, 1], got 1.5");
  EXPECT_KILN_ERROR(dropout(ones({2}), -0.1, true, gen), "[dropout] probability p must be in [0, 1], got -0.1");
  EXPECT_KILN_ERROR(dropout(ones({2}), NAN, true, gen), "[dropout] probability p must be in [0, 1], got nan");
  EXPECT_KILN_ERROR(dropout(ones({2}, {.dtype = kI64}), 0.5, true, gen),
                    "[dropout] expects a floating input (f32, f64, bf16), got i64 [2]");
  EXPECT_KILN_ERROR(dropout(Tensor(), 0.5, true, gen), "[dropout] input is an undefined tensor");
}

}  // namespace
}  // namespace kiln
