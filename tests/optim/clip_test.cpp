// clip_grad_norm / clip_grad_value (O3) against hand-computed norms, and an
// end-to-end training loop: value_and_grad -> clip -> AdamW on an nn model.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/optim/adam.h"
#include "kiln/optim/clip.h"
#include "tests/support/optim_testing.h"

namespace kiln::optim {
namespace {
using namespace testing;

struct Pair : nn::Module {
  nn::Parameter a, b;
  Pair() : a(register_parameter("a", zeros({2}))), b(register_parameter("b", zeros({1, 1}))) {}
};

// Gradients (3, 4) and (12): 2-norm 13, inf-norm 12, 1-norm 19.
nn::Gradients sample(const Pair& m) {
  return nn::Gradients(m.parameters(), {tensor<float>({3, 4}), full({1, 1}, 12.0)});
}

TEST(Clip, GradNormScalesWhenAboveMaxNorm) {
  Pair m;
  auto [clipped, norm] = clip_grad_norm(sample(m), 6.5);
  EXPECT_DOUBLE_EQ(norm, 13.0);
  float coef = float(6.5 / (13.0 + 1e-6));
  EXPECT_TRUE(all_close(clipped[0], tensor<float>({3 * coef, 4 * coef}), 1e-7, 0));
  EXPECT_TRUE(all_close(clipped[1], full({1, 1}, 12.0 * coef), 1e-7, 0));
  EXPECT_TRUE(equal(sample(m)[0], tensor<float>({3, 4})));  // functional: input untouched
  EXPECT_TRUE(clipped.params()[0].is_same(m.a));

  auto [same, n2] = clip_grad_norm(sample(m), 20.0);  // below: unchanged
  EXPECT_DOUBLE_EQ(n2, 13.0);
  EXPECT_TRUE(equal(same[0], sample(m)[0]));
}

TEST(Clip, OtherNorms) {
  Pair m;
  EXPECT_DOUBLE_EQ(clip_grad_norm(sample(m), 100.0, {.norm_type = std::numeric_limits<double>::infinity()}).second,
                   12.0);
  EXPECT_DOUBLE_EQ(clip_grad_norm(sample(m), 100.0, {.norm_type = 1.0}).second, 19.0);
  EXPECT_NEAR(clip_grad_norm(sample(m), 100.0, {.norm_type = 3.0}).second,
              std::cbrt(27.0 + 64.0 + 1728.0), 1e-12);
}

TEST(Clip, InPlaceOnLiveGrads) {
  Pair m;
  nn::Gradients g = sample(m);
  m.a.value().set_grad(clone(g[0]));
  m.b.value().set_grad(clone(g[1]));
  double norm = clip_grad_norm_(m.parameters(), 1.0);
  EXPECT_DOUBLE_EQ(norm, 13.0);
  EXPECT_NEAR(std::sqrt(sum(m.a.grad() * m.a.grad()).item<float>() + sum(m.b.grad() * m.b.grad()).item<float>()), 1.0,
              1e-6);
  // Parameters without a gradient are skipped.
  m.b.value().set_grad(Tensor());
  EXPECT_NEAR(clip_grad_norm_(m.parameters(), 1.0), 5.0 / 13.0, 1e-6);
}

TEST(Clip, GradValue) {
  Pair m;
  nn::Gradients v = clip_grad_value(sample(m), 3.5);
  EXPECT_TRUE(equal(v[0], tensor<float>({3, 3.5})));
  EXPECT_TRUE(equal(v[1], full({1, 1}, 3.5)));
  m.a.value().set_grad(tensor<float>({-9, 1}));
  clip_grad_value_(m.parameters(), 2.0);
  EXPECT_TRUE(equal(m.a.grad(), tensor<float>({-2, 1})));
}

TEST(Clip, Errors) {
  Pair m;
  EXPECT_KILN_ERROR(clip_grad_norm(sample(m), -1.0), "[clip_grad_norm] max_norm must be finite and >= 0, got -1");
  EXPECT_KILN_ERROR(clip_grad_norm(sample(m), 1.0, {.norm_type = 0.5}), "norm_type must be >= 1 or inf, got 0.5");
  nn::Gradients bad(m.parameters(), {tensor<float>({NAN, 1}), full({1, 1}, 1.0)});
  EXPECT_KILN_ERROR(clip_grad_norm(bad, 1.0, {.error_if_nonfinite = true}),
                    "the total 2-norm of the gradients is nan");
  EXPECT_TRUE(std::isnan(clip_grad_norm(bad, 1.0).second));  // default: reported, as PyTorch
  EXPECT_KILN_ERROR(clip_grad_value(sample(m), -1), "[clip_grad_value] clip_value must be >= 0");
}

// The loop users write: value_and_grad, clip, step. Loss on a fixed batch
// falls by orders of magnitude.
TEST(Clip, TrainsAnMlpWithAdamW) {
  Rngs rngs(0);
  nn::Sequential model(nn::Linear(4, 16, rngs), nn::Tanh(), nn::Linear(16, 1, rngs));
  Generator gen(1);
  Tensor x = randn({32, 4}, gen), y = sum(x * x, {1}, true) * 0.25;
  AdamW opt(model.parameters(), {.lr = 1e-2, .weight_decay = 1e-4});
  auto loss_fn = [&](nn::Sequential& m) { return mse_loss(m.forward(x), y); };
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    auto [loss, grads] = kiln::value_and_grad(model, loss_fn);
    auto [clipped, norm] = clip_grad_norm(grads, 1.0);
    opt.step(clipped);
    (step == 0 ? first : last) = loss.item<float>();
  }
  EXPECT_LT(last, first * 0.05) << "first " << first << " last " << last;
}

}  // namespace
}  // namespace kiln::optim
