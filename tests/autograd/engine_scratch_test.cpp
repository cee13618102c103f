// The engine's per-thread scratch (src/autograd/engine.cpp): reused across
// runs, a fresh one for a backward started inside another backward, nothing
// kept alive after a run, and graphs large enough to grow its table.
#include "kiln/ops/record.h"
#include "tests/support/autograd_testing.h"

namespace kiln {
namespace {

using namespace testing;

Tensor f64(std::vector<double> v) { return tensor(v); }

// x^2 whose vjp computes 2x with a nested kiln::grad on a graph of its own.
Tensor square_by_nested_grad(const Tensor& x) {
  Tensor out;
  {
    NoGradGuard g;
    out = mul(x, x);
  }
  record("square_by_nested_grad", {x}, {out}, {x}, [](const VjpArgs& v) -> Grads {
    Tensor xi = v.saved[0].detach().requires_grad_();
    Tensor two_x;
    {
      EnableGradGuard e;
      two_x = grad({sum(mul(xi, xi))}, {xi})[0];
    }
    return {mul(v.grad(), two_x)};
  });
  return out;
}

TEST(EngineScratch, BackwardInsideAVjpGetsItsOwnScratch) {
  Tensor x = f64({1, -2, 3}).requires_grad_();
  Tensor y = sum(mul(exp(square_by_nested_grad(x)), 3.0));
  y.backward();
  // d/dx 3 exp(x^2) = 6 x exp(x^2)
  Tensor want = mul(mul(f64({1, -2, 3}), 6.0), exp(mul(f64({1, -2, 3}), f64({1, -2, 3}))));
  EXPECT_TRUE(all_close(x.grad(), want, 1e-12, 1e-12));
  // The outer scratch is intact afterwards: the same again gives twice the gradient.
  sum(mul(exp(square_by_nested_grad(x)), 3.0)).backward();
  EXPECT_TRUE(all_close(x.grad(), mul(want, 2.0), 1e-12, 1e-12));
}

TEST(EngineScratch, LongChainsGrowTheTableAndRepeatRunsAgree) {
  // 300 nodes (the table starts at 64 slots), then a short graph, then the long one again.
  Tensor x = f64({0.5, -0.25}).requires_grad_();
  auto chain = [&](int n) {
    Tensor h = x;
    for (int i = 0; i < n; ++i) h = add(mul(h, 0.99), 0.01);
    return sum(h);
  };
  chain(300).backward();
  Tensor g1 = x.grad().clone();
  EXPECT_TRUE(all_close(g1, full({2}, std::pow(0.99, 300), {.dtype = kF64}), 1e-12, 1e-12));
  x.set_grad({});
  chain(3).backward();
  EXPECT_TRUE(all_close(x.grad(), full({2}, std::pow(0.99, 3), {.dtype = kF64}), 1e-12, 1e-12));
  x.set_grad({});
  chain(300).backward();
  EXPECT_TRUE(equal(x.grad(), g1));
}

TEST(EngineScratch, GradientsAreNotHeldAfterARun) {
  // A 1 MB intermediate gradient is freed when backward returns.
  Tensor x = ones({512, 256}).requires_grad_();
  sum(mul(exp(x), 2.0)).backward();
  x.set_grad({});
  int64_t before = memory_stats().current_bytes;
  sum(mul(exp(x), 2.0)).backward();
  x.set_grad({});
  EXPECT_EQ(memory_stats().current_bytes, before);
}

TEST(EngineScratch, ErrorInsideBackwardLeavesTheEngineUsable) {
  Tensor x = f64({1, 2}).requires_grad_();
  Tensor y = sum(mul(x, x));
  y.backward();
  EXPECT_THROW(y.backward(), Error);  // the graph was freed
  x.set_grad({});
  sum(mul(x, 3.0)).backward();
  EXPECT_TRUE(equal(x.grad(), f64({3, 3})));
}

}  // namespace
}  // namespace kiln
