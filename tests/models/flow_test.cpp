// Flow matching (kiln/models/flow.h) and the time embedding
// (kiln/nn/time_embedding.h): DiT's timestep_embedding golden, the path and
// its time convention (t = 0 noise, t = 1 data), the samplers on fields with
// a closed-form solution, and the analytic check of issue 28: an MLP velocity
// trained on 2-D Gaussian data against the exact velocity
//   v*(x, t) = mu + (t s^2 - (1 - t)) / ((1 - t)^2 + t^2 s^2) (x - t mu).
#include <chrono>
#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>

#include "kiln/core/grad_mode.h"
#include "kiln/models/flow.h"
#include "kiln/nn/activation.h"
#include "kiln/nn/time_embedding.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/index.h"
#include "kiln/ops/random.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/schedulers.h"
#include "tests/support/models_testing.h"

namespace kiln::models {
namespace {

using testing::all_close;
using testing::golden_tensor;

TEST(TimeEmbedding, MatchesDiTGolden) {
  const auto& j = testing::golden("flow_time_embedding");
  for (const auto& c : j.at("cases")) {
    const int64_t dim = c.at("dim").get<int64_t>();
    Tensor t = golden_tensor(c.at("t"));
    Tensor want = golden_tensor(c.at("out"));
    for (DType dt : {kF64, kF32}) {
      nn::SinusoidalTimeEmbedding emb(dim, 10000.0, j.at("time_scale").get<double>(), dt);
      Tensor got = emb.forward(to(t, dt));
      EXPECT_EQ(got.dtype(), dt);
      EXPECT_EQ(got.shape(), (Shape{t.size(0), dim}));
      EXPECT_TRUE(all_close(to(got, kF64), want, 0, 1e-6)) << "dim " << dim << " " << name(dt);
    }
  }
}

TEST(TimeEmbedding, FrequenciesOnceAndOddWidth) {
  nn::SinusoidalTimeEmbedding emb(7);
  ASSERT_EQ(emb.freqs.size(), 3u);
  EXPECT_DOUBLE_EQ(emb.freqs[0], 1.0);
  EXPECT_NEAR(emb.freqs[2], std::pow(10000.0, -2.0 / 3.0), 1e-15);
  Tensor e = emb.forward(tensor<float>({0.0f, 0.5f}));
  std::vector<float> v = e.to_vector<float>();
  // t = 0: cos = 1, sin = 0, and the odd column is 0.
  EXPECT_EQ(std::vector<float>(v.begin(), v.begin() + 7), (std::vector<float>{1, 1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(v[13], 0.0f);
  EXPECT_TRUE(emb.parameters().empty());
  EXPECT_KILN_ERROR(nn::SinusoidalTimeEmbedding(1), "[SinusoidalTimeEmbedding] dim must be at least 2, got 1");
  EXPECT_KILN_ERROR(emb.forward(zeros({2, 1})), "[SinusoidalTimeEmbedding] t [2, 1] f32 must be a floating [B]");
}

TEST(TimeEmbedding, TimestepEmbeddingKeysAndShape) {
  Rngs rngs(0);
  nn::TimestepEmbedding te(32, rngs, 16);
  std::vector<std::string> keys = testing::state_dict_keys(te);
  EXPECT_EQ(keys, (std::vector<std::string>{"mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias"}));
  EXPECT_EQ(te.forward(tensor<float>({0.1f, 0.9f, 0.3f})).shape(), (Shape{3, 32}));
}

TEST(FlowPath, ConventionNoiseAtZeroDataAtOne) {
  FlowPath path;
  Tensor x0 = tensor<double>({1, 2, 3, 4}, {2, 2}), x1 = tensor<double>({10, 20, 30, 40}, {2, 2});
  Tensor xt = path.interpolate(x0, x1, tensor<double>({0.0, 1.0}));
  EXPECT_EQ(xt.to_vector<double>(), (std::vector<double>{1, 2, 30, 40}));  // row 0 at t = 0: noise; row 1 at t = 1: data
  Tensor mid = path.interpolate(x0, x1, tensor<double>({0.25, 0.5}));
  EXPECT_EQ(mid.to_vector<double>(), (std::vector<double>{0.75 * 1 + 2.5, 0.75 * 2 + 5, 16.5, 22}));
  EXPECT_EQ(path.target(x0, x1).to_vector<double>(), (std::vector<double>{9, 18, 27, 36}));
  EXPECT_KILN_ERROR(path.interpolate(x0, zeros({3, 2}, {.dtype = kF64}), tensor<double>({0, 1})),
                    "[FlowPath] interpolate: x0 [2, 2] and x1 [3, 2] must be defined, of one shape");
  EXPECT_KILN_ERROR(path.interpolate(x0, x1, tensor<double>({0, 1, 1})), "t [3] must be [B = 2]");
}

TEST(FlowPath, SampleIsSeededFromItsStream) {
  FlowPath path;
  Generator g5(5);
  Tensor x1 = randn({64, 3, 2, 2}, g5);
  Rngs a{{"flow", 7}}, b{{"flow", 7}};
  FlowSample s = path.sample(x1, a), r = path.sample(x1, b);
  EXPECT_TRUE(all_close(s.xt, r.xt, 0, 0));
  EXPECT_TRUE(all_close(s.t, r.t, 0, 0));
  EXPECT_EQ(s.t.shape(), (Shape{64}));
  EXPECT_TRUE(all_close(s.target, sub(x1, s.x0), 0, 0));
  EXPECT_TRUE(all_close(s.xt, path.interpolate(s.x0, x1, s.t), 0, 0));
  FlowSample s2 = path.sample(x1, a);  // the stream advanced
  EXPECT_FALSE(all_close(s2.t, s.t, 0, 0));
  EXPECT_NEAR(path.loss(s.target, s).item<float>(), 0.0, 0.0);
  EXPECT_NEAR(path.loss(zeros_like(s.target), s).item<float>(), mean(square(s.target)).item<float>(), 1e-6);
  Rngs other{{"params", 0}};
  EXPECT_KILN_ERROR(path.sample(x1, other), "no stream named 'flow'");
  EXPECT_KILN_ERROR(FlowPath({.logit_std = 0}), "[FlowPath] logit_normal needs a finite logit_mean and logit_std > 0");
}

TEST(FlowPath, TimeSamplingDistributions) {
  Generator g(3);
  const int64_t n = 200000;
  Tensor u = FlowPath().sample_t(n, g, kF64);
  EXPECT_NEAR(mean(u).item<double>(), 0.5, 0.005);
  EXPECT_NEAR(var(u).item<double>(), 1.0 / 12, 0.002);
  FlowPath ln({.time_sampling = TimeSampling::logit_normal, .logit_mean = 0.5, .logit_std = 1.0});
  Tensor t = ln.sample_t(n, g, kF64);
  EXPECT_GT(amin(t, {0}).item<double>(), 0.0);
  EXPECT_LT(amax(t, {0}).item<double>(), 1.0);
  // The logit of t is N(0.5, 1).
  Tensor logit = log(div(t, rsub(t, 1)));
  EXPECT_NEAR(mean(logit).item<double>(), 0.5, 0.01);
  EXPECT_NEAR(kiln::std(logit).item<double>(), 1.0, 0.01);
}

TEST(FlowSampler, ClosedFormFields) {
  // dx/dt = c: both solvers are exact.
  Tensor x0 = tensor<double>({1, -2, 3}, {3, 1});
  auto constant = [](const Tensor& x, const Tensor&) { return full_like(x, 0.5); };
  EXPECT_TRUE(all_close(sample_flow(constant, x0, {.steps = 7}), add(x0, 0.5), 0, 1e-12));
  // dx/dt = x: Euler gives (1 + h)^n, Heun (1 + h + h^2 / 2)^n.
  auto linear = [](const Tensor& x, const Tensor&) { return x; };
  const int64_t n = 10;
  const double h = 0.1;
  EXPECT_TRUE(all_close(sample_flow(linear, x0, {.steps = n}), mul(x0, std::pow(1 + h, n)), 1e-12, 0));
  EXPECT_TRUE(all_close(sample_flow(linear, x0, {.steps = n, .solver = FlowSolver::heun}),
                        mul(x0, std::pow(1 + h + h * h / 2, n)), 1e-12, 0));
  // dx/dt = t: x(1) = x0 + 1/2; Euler's left sums give (n - 1) / (2n), Heun is exact.
  auto ramp = [](const Tensor& x, const Tensor& t) { return broadcast_to(unsqueeze(t, 1), x.shape()); };
  EXPECT_TRUE(all_close(sample_flow(ramp, x0, {.steps = 4}), add(x0, 3.0 / 8), 0, 1e-12));
  EXPECT_TRUE(all_close(sample_flow(ramp, x0, {.steps = 4, .solver = FlowSolver::heun}), add(x0, 0.5), 0, 1e-12));
  // Seeded noise.
  Generator a(9), b(9);
  EXPECT_TRUE(all_close(sample_flow(constant, {4, 2}, a), sample_flow(constant, {4, 2}, b), 0, 0));
  EXPECT_KILN_ERROR(sample_flow(constant, x0, {.steps = 0}), "[sample_flow] steps must be at least 1, got 0");
  auto wrong = [](const Tensor&, const Tensor&) { return zeros({1}); };
  EXPECT_KILN_ERROR(sample_flow(wrong, x0), "[sample_flow] velocity [1] must have x's shape [3, 1]");
}

// The exact velocity of the linear path from N(0, I) to N(mu, s^2 I).
Tensor exact_velocity(const Tensor& x, const Tensor& t, const Tensor& mu, double s) {
  Tensor tc = unsqueeze(t, 1);
  Tensor omt = rsub(tc, 1);
  Tensor coef = div(sub(mul(tc, s * s), omt), add(square(omt), mul(square(tc), s * s)));
  return add(mu, mul(coef, sub(x, mul(tc, mu))));
}

TEST(FlowMatching, AnalyticGaussian) {
  // An MLP v(x, t) on [x, t] trained by FlowPath on N((2, -1), 0.5^2 I):
  // within 5% RMS of v* over t in [0.05, 0.95], and Euler-50 samples with the
  // data's mean (within 0.05) and std (within 5%; Euler-50 on v* itself gives
  // 0.4845, 3% low). 3000 steps of batch 512: rel RMS 0.027 (0.035 and 0.027 with
  // seeds 1 and 2), 13-20 s on a busy 2-core machine.
  const auto start = std::chrono::steady_clock::now();
  const double s = 0.5;
  const Tensor mu = tensor<float>({2.0f, -1.0f}, {1, 2});
  Rngs rngs{{"params", 0}, {"flow", 1}, {"data", 2}};
  nn::Sequential net(nn::Linear(3, 128, rngs), nn::SiLU(), nn::Linear(128, 128, rngs), nn::SiLU(),
                     nn::Linear(128, 2, rngs));
  auto velocity = [&](const Tensor& x, const Tensor& t) { return net.forward(cat({x, unsqueeze(t, 1)}, 1)); };
  const int64_t steps = 3000, batch = 512;
  optim::Adam opt(net.parameters(), {.lr = 3e-3});
  optim::CosineScheduler sched({.max_lr = 3e-3, .min_lr = 0, .total_steps = steps});
  sched.apply(opt);
  FlowPath path;
  for (int64_t i = 0; i < steps; ++i) {
    Generator g = rngs.next("data");
    Tensor x1 = add(mul(randn({batch, 2}, g), s), mu);
    FlowSample fs = path.sample(x1, rngs);
    Tensor loss = path.loss(velocity(fs.xt, fs.t), fs);
    opt.zero_grad();
    loss.backward();
    opt.step();
    sched.step(opt);
  }
  NoGradGuard no_grad;
  const int64_t n = 20000;
  Generator g(11);
  Tensor t = add(mul(rand({n}, g), 0.9), 0.05);
  Tensor x1 = add(mul(randn({n, 2}, g), s), mu);
  Tensor xt = path.interpolate(randn({n, 2}, g), x1, t);
  Tensor vstar = exact_velocity(xt, t, mu, s);
  const double rel = std::sqrt(sum(square(sub(velocity(xt, t), vstar))).item<float>() /
                               sum(square(vstar)).item<float>());
  EXPECT_LT(rel, 0.05) << "relative RMS error of the learned velocity";

  Tensor x = sample_flow(velocity, {n, 2}, g, {.steps = 50});
  std::vector<float> m = mean(x, {0}).to_vector<float>(), sd = kiln::std(x, {0}).to_vector<float>();
  EXPECT_NEAR(m[0], 2.0, 0.05);
  EXPECT_NEAR(m[1], -1.0, 0.05);
  EXPECT_NEAR(sd[0], s, 0.05 * s);
  EXPECT_NEAR(sd[1], s, 0.05 * s);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("seconds", std::to_string(secs));
  std::printf("analytic: rel RMS %.4f, mean (%.4f, %.4f), std (%.4f, %.4f), %.1f s\n", rel, m[0], m[1], sd[0], sd[1],
              secs);
}

}  // namespace
}  // namespace kiln::models
