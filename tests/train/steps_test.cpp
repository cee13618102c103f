// The reference steps (T2) against the same computation written out by hand,
// and the GAN phases' separation of the two networks.
#include <gtest/gtest.h>

#include "kiln/nn/activation.h"
#include "kiln/nn/containers.h"
#include "kiln/nn/linear.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/random.h"
#include "kiln/optim/sgd.h"
#include "kiln/train/metrics.h"
#include "kiln/train/steps.h"
#include "tests/support/train_testing.h"

namespace kiln::train {
namespace {

using kiln::testing::all_close;
using kiln::testing::equal;

Forward call(const nn::Shared<nn::Linear>& m) {
  return [m](const Tensor& x) { return m(x); };
}

// w - lr * dL/dw for a Linear under loss_fn, computed without the step.
nn::StateDict expected_after_sgd(const nn::Shared<nn::Linear>& m, double lr,
                                 const std::function<Tensor(const Tensor&)>& loss_of_output, const Tensor& x) {
  Tensor w = m->weight.value().detach().clone().requires_grad_(), b = m->bias.value().detach().clone().requires_grad_();
  loss_of_output(linear(x, w, b)).backward();
  NoGradGuard no_grad;
  return {{"weight", sub(w.detach(), mul(w.grad(), lr))}, {"bias", sub(b.detach(), mul(b.grad(), lr))}};
}

struct Fixture {
  Rngs rngs{0};
  nn::Shared<nn::Linear> model = nn::make<nn::Linear>(5, 3, rngs);
  optim::SGD opt{model->parameters(), {.lr = 0.1}};
  Generator gen{11};
  Tensor x = randn({8, 5}, gen);
};

TEST(Steps, Classification) {
  Fixture f;
  Tensor y = randint(0, 3, {8}, f.gen);
  Tensor logits_before = f.model(f.x).detach();
  double want_loss = cross_entropy(logits_before, y).item<double>();
  auto want = expected_after_sgd(f.model, 0.1, [&](const Tensor& o) { return cross_entropy(o, y); }, f.x);
  StepResult r = classification_step(call(f.model), f.opt, {f.x, y});
  EXPECT_DOUBLE_EQ(r.loss, want_loss);
  EXPECT_EQ(r.count, 8);
  EXPECT_EQ(r.correct, count_correct(logits_before, y));
  EXPECT_TRUE(all_close(f.model->weight.value().detach(), want.at("weight"), 1e-6, 1e-7));
  EXPECT_TRUE(all_close(f.model->bias.value().detach(), want.at("bias"), 1e-6, 1e-7));
  EXPECT_FALSE(f.model->weight.grad().defined());  // zero_grad after the step

  auto before = f.model->state_dict();
  StepResult e = classification_eval(call(f.model), {f.x, y});
  EXPECT_DOUBLE_EQ(e.loss, cross_entropy(f.model(f.x), y).item<double>());
  EXPECT_TRUE(equal(f.model->weight.value().detach(), before.at("weight")));
  EXPECT_FALSE(f.model->weight.grad().defined());
}

TEST(Steps, RegressionAndAutoencoder) {
  Fixture f;
  Tensor y = randn({8, 3}, f.gen);
  auto want = expected_after_sgd(f.model, 0.1, [&](const Tensor& o) { return mse_loss(o, y); }, f.x);
  double want_loss = mse_loss(f.model(f.x), y).item<double>();
  StepResult r = regression_step(call(f.model), f.opt, {f.x, y});
  EXPECT_DOUBLE_EQ(r.loss, want_loss);
  EXPECT_EQ(r.correct, -1);
  EXPECT_TRUE(all_close(f.model->weight.value().detach(), want.at("weight"), 1e-6, 1e-7));
  EXPECT_DOUBLE_EQ(regression_eval(call(f.model), {f.x, y}).loss, mse_loss(f.model(f.x), y).item<double>());

  // An autoencoder's target is its input: a square Linear 5 -> 5.
  Rngs rngs(1);
  auto ae = nn::make<nn::Linear>(5, 5, rngs);
  optim::SGD opt(ae->parameters(), {.lr = 0.05});
  auto want_ae = expected_after_sgd(ae, 0.05, [&](const Tensor& o) { return mse_loss(o, f.x); }, f.x);
  StepResult a = autoencoder_step(call(ae), opt, {f.x, Tensor()});
  EXPECT_EQ(a.count, 8);
  EXPECT_TRUE(all_close(ae->weight.value().detach(), want_ae.at("weight"), 1e-6, 1e-7));
  EXPECT_DOUBLE_EQ(autoencoder_eval(call(ae), {f.x, Tensor()}).loss, mse_loss(ae(f.x), f.x).item<double>());
}

TEST(Steps, GanPhasesTouchOnlyTheirNetwork) {
  Rngs rngs(2);
  auto gen = nn::make<nn::Linear>(4, 6, rngs);   // noise [B, 4] -> sample [B, 6]
  auto disc = nn::make<nn::Linear>(6, 1, rngs);  // sample [B, 6] -> logit [B, 1]
  optim::SGD g_opt(gen->parameters(), {.lr = 0.1}), d_opt(disc->parameters(), {.lr = 0.1});
  Generator g(3);
  Tensor real = randn({8, 6}, g), noise = randn({8, 4}, g);

  auto g_before = gen->state_dict(), d_before = disc->state_dict();
  double want_d = 0, want_g = 0;
  int64_t want_correct = 0;
  {
    NoGradGuard no_grad;
    Tensor rl = disc(real), fl = disc(gen(noise));
    want_d = (binary_cross_entropy_with_logits(rl, ones({8, 1})) + binary_cross_entropy_with_logits(fl, zeros({8, 1})))
                 .item<double>();
    want_correct = sum(gt(rl, 0.0)).item<int64_t>() + sum(lt(fl, 0.0)).item<int64_t>();
  }
  StepResult d = gan_discriminator_step(call(gen), call(disc), d_opt, real, noise);
  EXPECT_NEAR(d.loss, want_d, 1e-6);
  EXPECT_EQ(d.count, 16);
  EXPECT_EQ(d.correct, want_correct);
  EXPECT_TRUE(equal(gen->weight.value().detach(), g_before.at("weight")));       // generator untouched
  EXPECT_FALSE(equal(disc->weight.value().detach(), d_before.at("weight")));     // discriminator stepped
  EXPECT_FALSE(gen->weight.grad().defined());

  auto d_mid = disc->state_dict();
  {
    NoGradGuard no_grad;
    want_g = binary_cross_entropy_with_logits(disc(gen(noise)), ones({8, 1})).item<double>();
  }
  StepResult gs = gan_generator_step(call(gen), call(disc), g_opt, *disc, noise);
  EXPECT_NEAR(gs.loss, want_g, 1e-6);
  EXPECT_EQ(gs.count, 8);
  EXPECT_EQ(gs.correct, -1);
  EXPECT_TRUE(equal(disc->weight.value().detach(), d_mid.at("weight")));  // discriminator untouched
  EXPECT_FALSE(disc->weight.grad().defined());                    // and its grads cleared
  EXPECT_FALSE(equal(gen->weight.value().detach(), g_before.at("weight")));
}

TEST(Steps, GanDiscriminatorNeedsF32Logits) {
  Rngs rngs(4);
  auto gen = nn::make<nn::Linear>(4, 6, rngs);
  auto disc = nn::make<nn::Linear>(6, 1, rngs);
  gen->to(kF64);
  disc->to(kF64);
  optim::SGD d_opt(disc->parameters(), {.lr = 0.1});
  Generator g(5);
  Tensor real = randn({8, 6}, g, {.dtype = kF64}), noise = randn({8, 4}, g, {.dtype = kF64});
  auto before = disc->state_dict();
  EXPECT_KILN_ERROR(gan_discriminator_step(call(gen), call(disc), d_opt, real, noise),
                    "[gan_discriminator_step] discriminator logits must be f32, got f64");
  EXPECT_TRUE(equal(disc->weight.value().detach(), before.at("weight")));  // refused before the update
  EXPECT_EQ(d_opt.step_count(), 0);
}

}  // namespace
}  // namespace kiln::train
