// GradientTape, functional grad / value_and_grad (with has_aux, nesting) and
// stop_gradient.
#include "tests/support/autograd_testing.h"

namespace kiln {
namespace {

using namespace testing;

Tensor f64(std::vector<double> v) { return tensor(v); }

TEST(GradientTape, RecordsEvenUnderNoGradGuard) {
  Tensor x = f64({1, 2}).requires_grad_();
  NoGradGuard outer;
  EXPECT_FALSE(mul(x, x).requires_grad());
  {
    GradientTape tape;
    EXPECT_TRUE(GradMode::is_enabled());
    Tensor loss = sum(mul(x, x));
    EXPECT_TRUE(loss.requires_grad());
    tape.backward(loss);
  }
  EXPECT_FALSE(GradMode::is_enabled());  // restored at scope exit
  EXPECT_TRUE(equal(x.grad(), f64({2, 4})));
}

TEST(GradientTape, GradientReturnsWithoutAccumulating) {
  Tensor x = f64({1, 2}).requires_grad_();
  Tensor y = f64({3, -1}).requires_grad_();
  GradientTape tape;
  Tensor loss = sum(mul(mul(x, x), y));
  auto g = tape.gradient(loss, {x, y});
  ASSERT_EQ(g.size(), 2u);
  EXPECT_TRUE(equal(g[0], f64({6, -4})));  // 2xy
  EXPECT_TRUE(equal(g[1], f64({1, 4})));   // x^2
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(g[0].requires_grad());
}

TEST(GradientTape, NonPersistentRunsOnce) {
  Tensor x = f64({1, 2}).requires_grad_();
  GradientTape tape;
  Tensor loss = sum(mul(x, x));
  tape.gradient(loss, {x});
  EXPECT_KILN_ERROR(tape.gradient(loss, {x}),
                    "[GradientTape] gradient() called on a non-persistent tape that already ran backward");
  EXPECT_KILN_ERROR(tape.backward(loss), "use GradientTape({.persistent = true})");
}

TEST(GradientTape, PersistentRunsAgain) {
  Tensor x = f64({1, 2}).requires_grad_();
  GradientTape tape({.persistent = true});
  EXPECT_TRUE(tape.persistent());
  Tensor loss = sum(mul(mul(x, x), x));
  auto g1 = tape.gradient(loss, {x});
  auto g2 = tape.gradient(loss, {x});
  EXPECT_TRUE(equal(g1[0], g2[0]));
  tape.backward(loss);
  tape.backward(loss);
  EXPECT_TRUE(equal(x.grad(), f64({6, 24})));  // 2 * 3x^2
}

TEST(GradientTape, WatchAllowUnusedAndCreateGraph) {
  Tensor x = f64({2, 3});
  GradientTape tape({.persistent = true});
  tape.watch(x);
  EXPECT_TRUE(x.requires_grad());
  Tensor other = f64({1}).requires_grad_();
  Tensor loss = sum(mul(mul(x, x), x));
  EXPECT_KILN_ERROR(tape.gradient(loss, {x, other}), "was not used to compute the outputs");
  auto g = tape.gradient(loss, {x, other}, {}, /*allow_unused=*/true, /*create_graph=*/true);
  EXPECT_FALSE(g[1].defined());
  EXPECT_TRUE(g[0].requires_grad());
  EXPECT_TRUE(equal(tape.gradient(sum(g[0]), {x})[0], f64({12, 18})));  // 6x
  // Non-scalar targets take a seed gradient.
  Tensor y = mul(x, x);
  EXPECT_TRUE(equal(tape.gradient(y, {x}, f64({1, 10}))[0], f64({4, 60})));
}

TEST(Functional, ValueAndGrad) {
  Tensor x = f64({1, 2, 3}), y = f64({4, 5, 6});
  auto f = [](const std::vector<Tensor>& xs) { return sum(mul(xs[0], xs[1])); };
  auto [value, grads] = value_and_grad(f, {x, y});
  EXPECT_EQ(value.item<double>(), 32.0);
  EXPECT_FALSE(value.requires_grad());  // a plain value
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_TRUE(equal(grads[0], y));
  EXPECT_TRUE(equal(grads[1], x));
  // The callers' tensors are untouched.
  EXPECT_FALSE(x.requires_grad());
  EXPECT_FALSE(x.grad().defined());
  EXPECT_TRUE(equal(grad(f, {x, y})[1], x));
}

TEST(Functional, WorksUnderNoGradGuardAndLeavesLeavesAlone) {
  Tensor w = f64({0.5, -1}).requires_grad_();
  NoGradGuard guard;
  auto g = grad([](const std::vector<Tensor>& xs) { return sum(exp(xs[0])); }, {w});
  EXPECT_TRUE(all_close(g[0], exp(w.detach()), 1e-15));
  EXPECT_FALSE(w.grad().defined());
  EXPECT_FALSE(g[0].requires_grad());
}

TEST(Functional, UnusedInputsGetZeros) {
  auto g = grad([](const std::vector<Tensor>& xs) { return sum(xs[0]); }, {f64({1, 2}), f64({3, 4, 5})});
  EXPECT_TRUE(equal(g[1], f64({0, 0, 0})));
  // A function that ignores every input.
  auto c = grad([](const std::vector<Tensor>&) { return scalar_tensor(1.0, {.dtype = kF64}); }, {f64({1})});
  EXPECT_TRUE(equal(c[0], f64({0})));
}

TEST(Functional, HasAux) {
  Tensor x = f64({1, 2});
  auto fn = [](const std::vector<Tensor>& xs) {
    Tensor sq = mul(xs[0], xs[0]);
    return std::pair{sum(sq), sq};
  };
  auto [value_aux, grads] = value_and_grad(fn, {x}, has_aux);
  auto& [loss, aux] = value_aux;
  EXPECT_EQ(loss.item<double>(), 5.0);
  EXPECT_TRUE(equal(aux.detach(), f64({1, 4})));
  EXPECT_TRUE(equal(grads[0], f64({2, 4})));
  // Any aux type, and the grad form returning (grads, aux).
  auto [g, label] = grad(
      [](const std::vector<Tensor>& xs) { return std::pair{sum(mul(xs[0], 3.0)), std::string("three")}; }, {x},
      has_aux);
  EXPECT_TRUE(equal(g[0], f64({3, 3})));
  EXPECT_EQ(label, "three");
}

TEST(Functional, NestedGradGivesSecondDerivatives) {
  Tensor x = f64({-1, 0.5, 2});
  auto cube = [](const std::vector<Tensor>& xs) { return sum(mul(mul(xs[0], xs[0]), xs[0])); };
  EXPECT_TRUE(all_close(grad(cube, {x})[0], f64({3, 0.75, 12}), 1e-12));
  auto dcube = [&](const std::vector<Tensor>& xs) { return sum(grad(cube, xs)[0]); };
  EXPECT_TRUE(all_close(grad(dcube, {x})[0], f64({-6, 3, 12}), 1e-12));
  // Also inside a GradientTape with a caller-owned leaf.
  Tensor w = f64({2}).requires_grad_();
  GradientTape tape;
  auto [v, g] = value_and_grad(cube, {w});
  EXPECT_TRUE(g[0].requires_grad());  // nested: differentiable
  EXPECT_TRUE(all_close(tape.gradient(sum(g[0]), {w})[0], f64({12}), 1e-12));
  EXPECT_FALSE(w.grad().defined());
}

TEST(Functional, Errors) {
  auto vec = [](const std::vector<Tensor>& xs) { return mul(xs[0], 2.0); };
  EXPECT_KILN_ERROR(grad(vec, {f64({1, 2})}),
                    "[grad] the function must return a floating-point scalar, got shape [2] dtype f64");
  EXPECT_KILN_ERROR(value_and_grad(vec, {arange(3)}),
                    "[value_and_grad] input 0 of shape [3] has dtype i64; only floating-point inputs can be "
                    "differentiated");
  EXPECT_KILN_ERROR(value_and_grad(TensorFn(), {f64({1})}), "[value_and_grad] empty function");
  EXPECT_KILN_ERROR(grad(vec, {Tensor()}), "[grad] input 0 is undefined");
}

TEST(Functional, StopGradient) {
  Tensor x = f64({1, 3}).requires_grad_();
  sum(mul(x, stop_gradient(x))).backward();
  EXPECT_TRUE(equal(x.grad(), f64({1, 3})));  // not 2x
  Tensor s = stop_gradient(x);
  EXPECT_TRUE(s.is_same_storage(x));
  EXPECT_FALSE(s.requires_grad());
}

}  // namespace
}  // namespace kiln
