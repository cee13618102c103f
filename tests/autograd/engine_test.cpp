// The backward engine: accumulation, graph shapes, retain/create graph, grad
// mode, error paths (freed graphs, in-place changes, bad arguments).
#include "tests/support/autograd_testing.h"

namespace kiln {
namespace {

using namespace testing;

Tensor f64(std::vector<double> v) { return tensor(v); }

TEST(Engine, LeafGradientsAccumulateAcrossBackwards) {
  Tensor x = f64({1, -2, 3}).requires_grad_();
  sum(mul(x, x)).backward();
  EXPECT_TRUE(equal(x.grad(), f64({2, -4, 6})));
  sum(mul(x, x)).backward();  // a new graph: adds into grad()
  EXPECT_TRUE(equal(x.grad(), f64({4, -8, 12})));
  x.set_grad({});
  EXPECT_FALSE(x.grad().defined());
  sum(mul(x, 3.0)).backward();
  EXPECT_TRUE(equal(x.grad(), f64({3, 3, 3})));
}

TEST(Engine, DiamondGraphSumsBothPaths) {
  Tensor x = f64({0.5, 2}).requires_grad_();
  Tensor a = mul(x, 2.0);  // da/dx = 2
  Tensor b = mul(x, x);    // db/dx = 2x (x used twice by one node)
  Tensor c = exp(a);       // a feeds two consumers
  Tensor loss = sum(add(mul(a, b), c));
  loss.backward();
  // d/dx [2x * x^2 + exp(2x)] = 6x^2 + 2 exp(2x)
  auto xv = std::vector<double>{0.5, 2};
  std::vector<double> want;
  for (double v : xv) want.push_back(6 * v * v + 2 * std::exp(2 * v));
  EXPECT_TRUE(all_close(x.grad(), f64(want), 1e-12, 1e-12));
}

TEST(Engine, GradientsReachEveryLeaf) {
  Tensor w = f64({1, 2, 3}).requires_grad_();
  Tensor v = f64({4, 5, 6}).requires_grad_();
  Tensor k = f64({1, 1, 1});  // no grad
  sum(mul(add(w, k), v)).backward();
  EXPECT_TRUE(equal(w.grad(), f64({4, 5, 6})));
  EXPECT_TRUE(equal(v.grad(), f64({2, 3, 4})));
  EXPECT_FALSE(k.grad().defined());
}

TEST(Engine, SecondBackwardWithoutRetainGraphFails) {
  Tensor x = f64({1, 2}).requires_grad_();
  Tensor loss = sum(mul(x, x));
  loss.backward();
  EXPECT_KILN_ERROR(loss.backward(),
                    "[backward] the graph through 'sum' was already freed by an earlier backward; pass "
                    "retain_graph=true");
}

TEST(Engine, RetainGraphAllowsASecondBackward) {
  Tensor x = f64({1, 2}).requires_grad_();
  Tensor loss = sum(mul(x, x));
  loss.backward({}, /*retain_graph=*/true);
  loss.backward();
  EXPECT_TRUE(equal(x.grad(), f64({4, 8})));
}

TEST(Engine, CreateGraphGivesSecondDerivatives) {
  Tensor x = f64({-1.5, 0.5, 2}).requires_grad_();
  Tensor y = sum(mul(mul(x, x), x));  // sum x^3
  Tensor g = grad({y}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true)[0];
  EXPECT_TRUE(all_close(g, f64({6.75, 0.75, 12}), 1e-12));  // 3x^2
  EXPECT_TRUE(g.requires_grad());
  Tensor g2 = grad({sum(g)}, {x})[0];
  EXPECT_TRUE(all_close(g2, f64({-9, 3, 12}), 1e-12));  // 6x
  // The same through backward(create_graph=true): x.grad() is differentiable.
  Tensor z = f64({2}).requires_grad_();
  sum(mul(mul(z, z), z)).backward({}, false, /*create_graph=*/true);
  Tensor dz = z.grad();
  EXPECT_TRUE(dz.requires_grad());
  EXPECT_TRUE(all_close(grad({sum(dz)}, {z})[0], f64({12}), 1e-12));
  // Third derivative of x^3 is 6.
  Tensor w = f64({0.7}).requires_grad_();
  Tensor d1 = grad({sum(mul(mul(w, w), w))}, {w}, {}, true, true)[0];
  Tensor d2 = grad({sum(d1)}, {w}, {}, true, true)[0];
  Tensor d3 = grad({sum(d2)}, {w})[0];
  EXPECT_TRUE(all_close(d3, f64({6}), 1e-12));
}

TEST(Engine, NoGradGuardStopsRecording) {
  Tensor x = f64({1, 2}).requires_grad_();
  EXPECT_TRUE(GradMode::is_enabled());
  {
    NoGradGuard guard;
    EXPECT_FALSE(GradMode::is_enabled());
    Tensor y = mul(x, x);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(y.is_leaf());
    EXPECT_EQ(y.grad_fn(), nullptr);
    {
      EnableGradGuard enable;  // nested: recording again
      EXPECT_TRUE(mul(x, x).requires_grad());
    }
    EXPECT_FALSE(GradMode::is_enabled());
    EXPECT_KILN_ERROR(sum(y).backward(), "does not require grad");
  }
  EXPECT_TRUE(GradMode::is_enabled());
  Tensor z = mul(x, x);
  EXPECT_TRUE(z.requires_grad());
  ASSERT_NE(z.grad_fn(), nullptr);
  EXPECT_STREQ(z.grad_fn()->name(), "mul");
}

TEST(Engine, RequiresGradRules) {
  Tensor x = f64({1, 2}).requires_grad_();
  Tensor y = mul(x, 2.0);
  EXPECT_FALSE(y.is_leaf());
  EXPECT_KILN_ERROR(y.requires_grad_(false), "[requires_grad_] can only change requires_grad of leaf tensors (this one comes from 'mul')");
  EXPECT_NO_THROW(y.requires_grad_(true));  // already true: nothing to change
  EXPECT_KILN_ERROR(arange(3).requires_grad_(), "[requires_grad_] only floating-point tensors can require gradients, got i64");
  EXPECT_KILN_ERROR(tensor<bool>({true}).requires_grad_(), "got bool");
  Tensor z = f64({1}).requires_grad_();
  z.requires_grad_(false);
  EXPECT_FALSE(z.requires_grad());
  // Integer results of differentiable inputs never require grad.
  EXPECT_FALSE(argmax(x).requires_grad());
  EXPECT_FALSE(gt(x, 1.0).requires_grad());
}

TEST(Engine, NonScalarBackwardNeedsAGradient) {
  Tensor x = f64({1, 2, 3, 4, 5, 6}).view({2, 3}).detach().requires_grad_();
  Tensor y = mul(x, x);
  EXPECT_KILN_ERROR(y.backward(),
                    "[backward] a gradient must be given for output 0 of shape [2, 3]; only scalars get an implicit 1");
  EXPECT_KILN_ERROR(y.backward(ones({3, 2}, {.dtype = kF64})),
                    "[backward] gradient of shape [3, 2] for output 0 of shape [2, 3]");
  Tensor seed = tensor<double>({1, 0, 0, 0, 0, 2}, {2, 3});
  y.backward(seed);
  EXPECT_TRUE(equal(x.grad(), tensor<double>({2, 0, 0, 0, 0, 24}, {2, 3})));
  EXPECT_KILN_ERROR(f64({1}).backward(), "[backward] output 0 of shape [1] does not require grad");
}

TEST(Engine, RetainGradKeepsANonLeafGradient) {
  Tensor x = f64({1, -1}).requires_grad_();
  Tensor h = mul(x, 3.0);
  Tensor other = mul(x, 5.0);
  h.retain_grad();
  sum(add(mul(h, h), other)).backward();
  EXPECT_TRUE(equal(h.grad(), f64({6, -6})));  // d(h^2)/dh = 2h
  EXPECT_FALSE(other.grad().defined());        // not retained
  EXPECT_TRUE(equal(x.grad(), f64({23, -13}))); // 18x + 5
  EXPECT_FALSE(h.grad().requires_grad());
  EXPECT_KILN_ERROR(f64({1}).retain_grad(), "[retain_grad] tensor does not require grad");
}

TEST(Engine, InPlaceChangeOfASavedTensorIsCaught) {
  Tensor x = f64({1, 2}).requires_grad_();
  Tensor a = mul(x, 2.0);  // non-leaf
  Tensor b = mul(a, a);    // saves a
  mul_(a, 3.0);            // allowed on a non-leaf, but b's saved input changed
  EXPECT_KILN_ERROR(sum(b).backward(), "saved by 'mul' was modified in place after it was saved");
  // A saved output (exp keeps its result) is checked too.
  Tensor y = f64({0.5}).requires_grad_();
  Tensor e = exp(y);
  add_(e, 1.0);
  EXPECT_KILN_ERROR(sum(e).backward(), "was modified in place after it was saved");
}

TEST(Engine, InPlaceOnALeafThatRequiresGradFails) {
  Tensor w = f64({1, 2}).requires_grad_();
  EXPECT_KILN_ERROR(add_(w, 1.0),
                    "[add_] a leaf tensor of shape [2] that requires grad cannot be modified in place; use NoGradGuard");
  EXPECT_TRUE(equal(w.detach(), f64({1, 2})));  // untouched
  {
    NoGradGuard guard;  // parameter updates are fine
    sub_(w, 0.5);
  }
  EXPECT_TRUE(equal(w.detach(), f64({0.5, 1.5})));
  EXPECT_TRUE(w.requires_grad());
}

TEST(Engine, InPlaceOpsRecordAndDifferentiate) {
  Tensor x = f64({1, 2}).requires_grad_();
  Tensor a = mul(x, 1.0);
  mul_(a, x);  // a = x * x, in place
  ASSERT_NE(a.grad_fn(), nullptr);
  sum(a).backward();
  EXPECT_TRUE(equal(x.grad(), f64({2, 4})));
}

TEST(Engine, DetachSharesStorageNotGraph) {
  Tensor x = f64({1, 2}).requires_grad_();
  Tensor y = mul(x, 2.0);
  Tensor d = y.detach();
  EXPECT_TRUE(d.is_same_storage(y));
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_EQ(d.grad_fn(), nullptr);
  {
    NoGradGuard g;
    fill_(d, 7.0);  // writes through to y's storage
  }
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{7, 7}));
  Tensor z = f64({3, 4}).requires_grad_();
  sum(mul(z, x.detach())).backward();
  EXPECT_TRUE(equal(z.grad(), f64({1, 2})));
  EXPECT_FALSE(x.grad().defined());
}

TEST(Engine, GradFunctionAndAllowUnused) {
  Tensor x = f64({1, 2}).requires_grad_();
  Tensor unused = f64({5}).requires_grad_();
  Tensor loss = sum(mul(x, x));
  EXPECT_KILN_ERROR(grad({loss}, {x, unused}, {}, true),
                    "[grad] input 1 of shape [1] was not used to compute the outputs; pass allow_unused=true");
  auto g = grad({loss}, {x, unused}, {}, false, false, /*allow_unused=*/true);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_TRUE(equal(g[0], f64({2, 4})));
  EXPECT_FALSE(g[1].defined());
  EXPECT_FALSE(x.grad().defined());  // grad() returns, never accumulates
  EXPECT_KILN_ERROR(grad({sum(x)}, {f64({1})}), "[grad] input 0 does not require grad");
  // Gradient with respect to an intermediate.
  Tensor h = mul(x, 3.0);
  EXPECT_TRUE(equal(grad({sum(mul(h, h))}, {h})[0], f64({6, 12})));
}

TEST(Engine, BackwardThroughViewsAndBroadcasts) {
  Tensor x = leaf({2, 3}, 1);
  Tensor b = leaf({3}, 2);
  Tensor y = add(x.t(), b.unsqueeze(1).expand({3, 2}));  // [3, 2]
  sum(mul(y, y)).backward();
  Tensor want_x = mul(add(x, b.unsqueeze(0)), 2.0).detach();
  EXPECT_TRUE(all_close(x.grad(), want_x, 1e-12));
  EXPECT_TRUE(all_close(b.grad(), sum(want_x, {0}).detach(), 1e-12));
}

// A square whose vjp forgets the factor 2; gradcheck must notice.
Tensor wrong_square(const Tensor& x) {
  Tensor out;
  {
    NoGradGuard g;
    out = mul(x, x);
  }
  if (needs_grad(x))
    record("wrong_square", {x}, {out}, {x}, [](const VjpArgs& a) -> Grads { return {mul(a.grad(), a.saved[0])}; });
  return out;
}

Tensor right_square(const Tensor& x) {
  Tensor out;
  {
    NoGradGuard g;
    out = mul(x, x);
  }
  if (needs_grad(x))
    record("right_square", {x}, {out}, {x},
           [](const VjpArgs& a) -> Grads { return {mul(mul(a.grad(), a.saved[0]), 2.0)}; });
  return out;
}

TEST(Gradcheck, CatchesAWrongVjp) {
  Tensor x = leaf({3}, 7, 0.5, 1.5);
  auto bad = gradcheck([](const std::vector<Tensor>& xs) { return wrong_square(xs[0]); }, {x});
  EXPECT_FALSE(bad.ok);
  EXPECT_NE(bad.message.find("analytic"), std::string::npos) << bad.message;
  EXPECT_NE(bad.message.find("numeric"), std::string::npos) << bad.message;
  EXPECT_GRADCHECK([](const std::vector<Tensor>& xs) { return right_square(xs[0]); }, {x});
  ASSERT_NE(wrong_square(x).grad_fn(), nullptr);
  EXPECT_STREQ(wrong_square(x).grad_fn()->name(), "wrong_square");
}

TEST(Gradcheck, MultipleInputsAndOutputs) {
  Tensor a = leaf({2, 3}, 3), b = leaf({3}, 4);
  EXPECT_GRADCHECK(
      [](const std::vector<Tensor>& xs) {
        return std::vector<Tensor>{mul(xs[0], xs[1]), sum(exp(xs[0]))};
      },
      {a, b});
  // A constant (non-grad) input is skipped.
  Tensor c = f64({1, 2, 3});
  EXPECT_GRADCHECK([](const std::vector<Tensor>& xs) { return mul(xs[0], xs[1]); }, {b, c});
}

TEST(Gradcheck, NeedsF64) {
  Tensor x = tensor<float>({1, 2}).requires_grad_();
  EXPECT_KILN_ERROR(gradcheck([](const std::vector<Tensor>& xs) { return mul(xs[0], xs[0]); }, {x}),
                    "[gradcheck] input 0 has dtype f32; gradcheck needs f64 inputs");
}

TEST(Engine, VjpShapeMismatchIsReported) {
  Tensor x = f64({1, 2, 3}).requires_grad_();
  Tensor out;
  {
    NoGradGuard g;
    out = mul(x, 2.0);
  }
  record("bad_shape", {x}, {out}, {}, [](const VjpArgs& a) -> Grads { return {sum(a.grad())}; });
  EXPECT_KILN_ERROR(sum(out).backward(),
                    "vjp of 'bad_shape' returned a gradient of shape [] for input 0 of shape [3]");
}

TEST(Engine, RandomFillOfANonLeafCutsItsGradient) {
  Tensor x = f64({1, 2}).requires_grad_();
  Tensor y = mul(x, 2.0);
  Generator g(0);
  uniform_(y, 0, 1, g);  // y no longer depends on x
  ASSERT_NE(y.grad_fn(), nullptr);
  EXPECT_STREQ(y.grad_fn()->name(), "uniform_");
  sum(mul(y, x)).backward();
  EXPECT_TRUE(all_close(x.grad(), y.detach(), 0, 0));
}

}  // namespace
}  // namespace kiln
