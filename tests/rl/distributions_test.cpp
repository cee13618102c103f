// Tests of rl::Categorical and rl::TanhGaussian: PyTorch 1.13 goldens
// (tools/goldens/rl.py: torch.distributions.Categorical; Normal with
// TanhTransform and AffineTransform; CleanRL's SAC formula), f64 gradchecks of
// log_prob and entropy, sampling frequencies and moments, and errors.
#include <cmath>

#include "kiln/rl/distributions.h"
#include "tests/support/rl_testing.h"

namespace kiln::rl {
namespace {

using testing::all_close;
using testing::golden;
using testing::golden_tensor;

TEST(RlCategorical, MatchesTorchDistributions) {
  const auto& j = golden("rl_distributions").at("categorical");
  Tensor logits = golden_tensor(j.at("logits")).requires_grad_(true);
  Tensor actions = golden_tensor(j.at("actions"));
  Categorical d(logits);
  EXPECT_TRUE(all_close(d.logits(), golden_tensor(j.at("norm_logits")), 1e-12, 1e-12));
  EXPECT_TRUE(all_close(d.probs(), golden_tensor(j.at("probs")), 1e-12, 1e-12));
  Tensor lp = d.log_prob(actions), ent = d.entropy();
  EXPECT_TRUE(all_close(lp, golden_tensor(j.at("log_prob")), 1e-12, 1e-12));
  EXPECT_TRUE(all_close(ent, golden_tensor(j.at("entropy")), 1e-12, 1e-12));
  EXPECT_TRUE(testing::equal(d.mode(), golden_tensor(j.at("mode"))));
  (sum(golden_tensor(j.at("w1")) * lp) + sum(golden_tensor(j.at("w2")) * ent)).backward();
  EXPECT_TRUE(all_close(logits.grad(), golden_tensor(j.at("grad_logits")), 1e-12, 1e-12));

  Categorical masked(golden_tensor(j.at("masked_logits")));  // -inf: an impossible category
  EXPECT_TRUE(all_close(masked.log_prob(golden_tensor(j.at("masked_actions"))),
                        golden_tensor(j.at("masked_log_prob")), 1e-12, 1e-12));
  EXPECT_TRUE(all_close(masked.entropy(), golden_tensor(j.at("masked_entropy")), 1e-12, 1e-12));
}

TEST(RlCategorical, GradcheckOfLogProbAndEntropy) {
  Tensor actions = tensor<int64_t>({2, 0, 1});
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return Categorical(in[0]).log_prob(actions); },
                   {testing::leaf({3, 4}, 1, -2, 2)});
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return Categorical(in[0]).entropy(); },
                   {testing::leaf({3, 4}, 2, -2, 2)});
}

TEST(RlCategorical, SamplesFollowTheProbabilitiesAndRepeatWithTheSeed) {
  // One row repeated: the frequencies of 40000 draws against p = softmax.
  const int64_t n = 40000;
  Tensor row = tensor<float>({0.0f, 1.0f, -1.0f, std::log(0.5f)}, {1, 4});
  Categorical d(expand(row, {n, 4}).contiguous());
  Generator g(5);
  Tensor s = d.sample(g);
  EXPECT_EQ(s.dtype(), kI64);
  std::vector<double> count(4, 0.0);
  for (int64_t a : s.to_vector<int64_t>()) count[size_t(a)] += 1;
  std::vector<float> p = softmax(row, 1).to_vector<float>();
  for (size_t k = 0; k < 4; ++k) {
    const double sd = std::sqrt(p[k] * (1 - p[k]) / double(n));
    EXPECT_NEAR(count[k] / double(n), p[k], 4 * sd) << "category " << k;
  }
  Generator g2(5);
  EXPECT_TRUE(testing::equal(d.sample(g2), s));
  // An impossible category is never drawn.
  Categorical masked(tensor<float>({0.0f, -INFINITY, 0.0f}, {1, 3}).expand({1000, 3}).contiguous());
  for (int64_t a : masked.sample(g).to_vector<int64_t>()) EXPECT_NE(a, 1);
}

TEST(RlCategorical, BadInputsAreErrors) {
  EXPECT_KILN_ERROR(Categorical(zeros({4})), "[Categorical] logits must be [B, n] floating with n > 0, got [4] f32");
  Categorical d(zeros({3, 2}));
  EXPECT_KILN_ERROR(d.log_prob(tensor<int64_t>({0, 1})), "[Categorical.log_prob] actions must be [3] i64");
  EXPECT_KILN_ERROR(d.log_prob(tensor<int64_t>({0, 2, 1})), "[Categorical.log_prob] actions[1] = 2 is outside [0, 2)");
  EXPECT_KILN_ERROR(d.log_prob(zeros({3})), "[Categorical.log_prob] actions must be [3] i64");
  Generator g(0);
  EXPECT_KILN_ERROR(Categorical(tensor<float>({NAN, 0.0f}, {1, 2})).sample(g),
                    "[Categorical.sample] row 0 of the logits [1, 2] has no valid category");
}

void check_tanh_gaussian(const nlohmann::json& j) {
  std::vector<double> low = golden_tensor(j.at("low")).to_vector<double>();
  std::vector<double> high = golden_tensor(j.at("high")).to_vector<double>();
  Tensor mean = golden_tensor(j.at("mean")).requires_grad_(true);
  Tensor log_std = golden_tensor(j.at("log_std")).requires_grad_(true);
  Tensor raw = golden_tensor(j.at("raw"));
  TanhGaussian d(mean, log_std, low, high);
  Tensor lp = d.log_prob(raw);
  EXPECT_TRUE(all_close(lp, golden_tensor(j.at("log_prob")), 1e-12, 1e-12));
  EXPECT_TRUE(all_close(lp, golden_tensor(j.at("transformed_log_prob")), 1e-10, 1e-10));
  // The SAC formula's 1e-6 moves it little where tanh is not saturated (the
  // last row has raw 8, where it caps the correction).
  EXPECT_TRUE(all_close(lp.narrow(0, 0, 3), golden_tensor(j.at("sac_log_prob")).narrow(0, 0, 3), 1e-4, 1e-4));
  EXPECT_TRUE(all_close(d.squash(raw), golden_tensor(j.at("action")), 1e-12, 1e-12));
  EXPECT_TRUE(all_close(d.mode(), golden_tensor(j.at("mode")), 1e-12, 1e-12));
  EXPECT_TRUE(all_close(d.entropy(), golden_tensor(j.at("entropy")), 1e-12, 1e-12));
  sum(golden_tensor(j.at("w")) * lp).backward();
  EXPECT_TRUE(all_close(mean.grad(), golden_tensor(j.at("grad_mean")), 1e-12, 1e-12));
  EXPECT_TRUE(all_close(log_std.grad(), golden_tensor(j.at("grad_log_std")), 1e-12, 1e-12));
}

TEST(RlTanhGaussian, MatchesTorchNormalWithTanhTransform) {
  {
    SCOPED_TRACE("log_std per row");
    check_tanh_gaussian(golden("rl_distributions").at("tanh_gaussian"));
  }
  {
    SCOPED_TRACE("log_std shared [A]");
    check_tanh_gaussian(golden("rl_distributions").at("tanh_gaussian_shared"));
  }
}

TEST(RlTanhGaussian, LogProbStaysFiniteInF32WhereTanhRoundsToTheBound) {
  TanhGaussian d(zeros({1, 1}), zeros({1}), {-1.0}, {1.0});
  Tensor raw = full({1, 1}, 12.0);
  EXPECT_EQ(d.squash(raw).item<float>(), 1.0f);  // the action sits on the bound
  const double lp = d.log_prob(raw).item<float>();
  // log N(12) - 2 (log 2 - 12 - softplus(-24)) = -72 - log(2 pi)/2 - 2 log 2 + 24
  EXPECT_NEAR(lp, -72 - 0.5 * std::log(2 * M_PI) - 2 * std::log(2.0) + 24, 1e-3);
}

TEST(RlTanhGaussian, GradcheckOfLogProbEntropyAndRsample) {
  std::vector<double> low{-2, 0}, high{1, 4};
  Tensor raw = testing::leaf({3, 2}, 3, -2, 2).detach();
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return TanhGaussian(in[0], in[1], low, high).log_prob(raw); },
                   {testing::leaf({3, 2}, 4), testing::leaf({3, 2}, 5, -1, 0.5)});
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return TanhGaussian(in[0], in[1], low, high).log_prob(raw); },
                   {testing::leaf({3, 2}, 6), testing::leaf({2}, 7, -1, 0.5)});
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return TanhGaussian(in[0], in[1], low, high).entropy(); },
                   {testing::leaf({3, 2}, 8), testing::leaf({2}, 9)});
  // rsample then log_prob of its own raw action (SAC's actor term): the same
  // noise each evaluation, differentiable through both the draw and the density.
  EXPECT_GRADCHECK(
      [&](const std::vector<Tensor>& in) {
        Generator g(11);
        TanhGaussian d(in[0], in[1], low, high);
        auto s = d.rsample(g);
        return cat({d.log_prob(s.raw), s.action.flatten()});
      },
      {testing::leaf({3, 2}, 12), testing::leaf({3, 2}, 13, -1, 0.5)});
}

TEST(RlTanhGaussian, SamplesHaveTheGaussiansMomentsAndStayInTheBox) {
  const int64_t n = 20000;
  Tensor mean = full({n, 2}, 0.3), log_std = tensor<float>({std::log(0.5f), std::log(2.0f)});
  TanhGaussian d(mean, log_std, {-1.0, 10.0}, {1.0, 20.0});
  Generator g(3);
  auto s = d.sample(g);
  EXPECT_FALSE(s.raw.requires_grad());
  Tensor m = kiln::mean(s.raw, {0}), sd = kiln::std(s.raw, {0});
  EXPECT_NEAR(m.to_vector<float>()[0], 0.3, 4 * 0.5 / std::sqrt(double(n)));
  EXPECT_NEAR(m.to_vector<float>()[1], 0.3, 4 * 2.0 / std::sqrt(double(n)));
  EXPECT_NEAR(sd.to_vector<float>()[0], 0.5, 0.02);
  EXPECT_NEAR(sd.to_vector<float>()[1], 2.0, 0.06);
  EXPECT_TRUE(all_close(s.action, d.squash(s.raw)));
  EXPECT_GE(amin(s.action, {0}).to_vector<float>()[0], -1.0f);
  EXPECT_LE(amax(s.action, {0}).to_vector<float>()[1], 20.0f);
  EXPECT_GE(amin(s.action, {0}).to_vector<float>()[1], 10.0f);
  Generator g2(3);
  EXPECT_TRUE(testing::equal(d.sample(g2).raw, s.raw));
}

TEST(RlTanhGaussian, BadInputsAreErrors) {
  Tensor m = zeros({2, 3});
  EXPECT_KILN_ERROR(TanhGaussian(zeros({3}), zeros({3}), {0, 0, 0}, {1, 1, 1}),
                    "[TanhGaussian] mean must be [B, A] floating, got [3] f32");
  EXPECT_KILN_ERROR(TanhGaussian(m, zeros({2}), {0, 0, 0}, {1, 1, 1}),
                    "[TanhGaussian] log_std must be [2, 3] or [3] like mean");
  EXPECT_KILN_ERROR(TanhGaussian(m, zeros({3}), {0, 0}, {1, 1}), "[TanhGaussian] needs 3 bounds for mean [2, 3]");
  EXPECT_KILN_ERROR(TanhGaussian(m, zeros({3}), {0, 1, 0}, {1, 1, 1}),
                    "[TanhGaussian] bounds must be finite with low < high, got [1, 1] for dim 1");
  EXPECT_KILN_ERROR(TanhGaussian(m, zeros({3}), {0, -INFINITY, 0}, {1, 1, 1}), "bounds must be finite");
  TanhGaussian d(m, zeros({3}), {0, 0, 0}, {1, 1, 1});
  EXPECT_KILN_ERROR(d.log_prob(zeros({2, 2})), "[TanhGaussian.log_prob] raw actions must be [2, 3] f32 like mean");
  EXPECT_KILN_ERROR(TanhGaussian(m, zeros({3}), Space::discrete(3)), "[TanhGaussian] needs a Box space of shape [A]");
}

}  // namespace
}  // namespace kiln::rl
