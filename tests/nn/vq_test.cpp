// VectorQuantizer and ResidualVQ: EMA steps and RVQ against tools/goldens/vq.py,
// straight-through bitwise, commitment gradcheck in f64, highest-norm init,
// dead-code re-init (same update, batch-size independent, not undone), errors.
#include <gtest/gtest.h>

#include <set>

#include "kiln/nn/vq.h"
#include "tests/support/nn_testing.h"

namespace kiln::testing {
namespace {

using nn::ResidualVQ;
using nn::VectorQuantizer;
using nn::VectorQuantizerOptions;

// A quantizer whose codebook is `cb` (cluster sizes 1, sums = codebook) and that
// never re-seeds itself: the state the goldens start from.
void set_codebook(VectorQuantizer& vq, const Tensor& cb) {
  NoGradGuard g;
  copy_(vq.codebook, cb);
  copy_(vq.embed_sum, cb);
  fill_(vq.cluster_size, 1);
  fill_(vq.initialized, 1);
}

constexpr VectorQuantizerOptions kPlain{.dead_code_threshold = 0, .highest_norm_init = false};

TEST(VectorQuantizer, FiveEmaStepsMatchGolden) {
  const auto& g = golden("vq")["ema"];
  VectorQuantizer vq(g["K"], g["D"], kPlain);
  set_codebook(vq, golden_tensor(g["codebook0"]));
  for (const auto& s : g["steps"]) {
    Tensor z = golden_tensor(s["z"]);
    auto out = vq.forward(z);
    EXPECT_TRUE(equal(out.indices, golden_tensor(s["indices"])));
    EXPECT_NEAR(out.commitment_loss.item<float>(), double(s["loss"]), 1e-6 * double(s["loss"]));
    vq.ema_update(z, out.indices);
    EXPECT_TRUE(all_close(vq.cluster_size, golden_tensor(s["cluster_size"]), 1e-6, 0));
    EXPECT_TRUE(all_close(vq.embed_sum, golden_tensor(s["embed_sum"]), 1e-6, 1e-7));
    EXPECT_TRUE(all_close(vq.codebook, golden_tensor(s["codebook"]), 1e-6, 1e-7));
  }
}

TEST(VectorQuantizer, StraightThroughForwardAndGradientBitwise) {
  VectorQuantizer vq(16, 8, kPlain);
  Generator gen(3);
  Tensor z = randn({2, 5, 8}, gen).requires_grad_();
  Tensor c = randn({2, 5, 8}, gen);
  auto out = vq.forward(z);
  EXPECT_EQ(out.indices.shape(), (Shape{2, 5}));
  EXPECT_EQ(out.indices.dtype(), kI64);
  // The forward value is the code itself, not z + (z_q - z).
  EXPECT_TRUE(equal(out.quantized.detach(), vq.lookup(out.indices)));
  EXPECT_TRUE(equal(vq.encode(z), out.indices));
  sum(mul(out.quantized, c)).backward();
  EXPECT_TRUE(equal(z.grad(), c));  // the gradient at z_q, unchanged
  EXPECT_EQ(vq.parameters().size(), 0u);
}

TEST(VectorQuantizer, CommitmentLossGradcheckF64) {
  VectorQuantizer vq(8, 3, kPlain);
  vq.to(kF64);
  Tensor z = leaf({6, 3}, 11, -2, 2);
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return vq.forward(in[0]).commitment_loss; }, {z});
  // And its value: beta * mean((z - z_q)^2).
  auto out = vq.forward(z);
  Tensor want = mul(mean(square(sub(z.detach(), vq.lookup(out.indices)))), 0.25);
  EXPECT_TRUE(equal(out.commitment_loss.detach(), want));
}

TEST(VectorQuantizer, HighestNormInitPicksLargestRowsTiesByIndex) {
  // Rows with norms 1, 5, 3, 5, 0, 4 (two of 5): K = 3 gives rows 1, 3, 5.
  Tensor x = tensor<float>({1, 0, 0, 5, 3, 0, 5, 0, 0, 0, 4, 0}, {6, 2});
  VectorQuantizer vq(3, 2);
  EXPECT_EQ(vq.initialized.item<int64_t>(), 0);
  auto out = vq.forward(x);  // train mode: seeds from this batch first
  EXPECT_EQ(vq.initialized.item<int64_t>(), 1);
  EXPECT_TRUE(equal(vq.codebook, tensor<float>({0, 5, 5, 0, 4, 0}, {3, 2})));  // ties: row 1 before row 3
  EXPECT_TRUE(equal(vq.embed_sum, vq.codebook));
  EXPECT_TRUE(equal(vq.cluster_size, ones({3})));
  EXPECT_EQ(out.indices.to_vector<int64_t>(), (std::vector<int64_t>{2, 0, 2, 1, 2, 2}));
  // A second batch does not re-seed it.
  Tensor before = vq.codebook.clone();
  vq.forward(mul(x, 10.0));
  EXPECT_TRUE(equal(vq.codebook, before));
  // Too few rows for K codes: an error, nothing seeded.
  VectorQuantizer small(8, 2);
  Tensor cb = small.codebook.clone();
  EXPECT_KILN_ERROR(small.forward(x), "fewer rows than codebook_size 8");
  EXPECT_TRUE(equal(small.codebook, cb));
  EXPECT_EQ(small.initialized.item<int64_t>(), 0);
  // Explicit init_from does the same.
  VectorQuantizer vq2(3, 2, {.highest_norm_init = false});
  vq2.init_from(x);
  EXPECT_TRUE(equal(vq2.codebook, vq.codebook));
}

TEST(VectorQuantizer, DeadCodeReplacedInSameUpdateAndSelectable) {
  // Codes 0, 1 near the data; code 2 and 3 far away: never chosen. decay 0.5
  // so that one update takes their share from 1/4 (the prior) under 5%.
  VectorQuantizer vq(4, 2, {.decay = 0.5, .dead_code_threshold = 0.05, .highest_norm_init = false, .seed = 5});
  set_codebook(vq, tensor<float>({1, 1, -1, -1, 100, 100, -100, 100}, {4, 2}));
  Generator gen(7);
  Tensor z = randn({40, 2}, gen);
  auto out = vq.forward(z);
  for (int64_t i : out.indices.to_vector<int64_t>()) EXPECT_LT(i, 2);
  // Codes 2, 3: cluster 0.5 of a total ~22: share ~0.02 < 0.05, dead now.
  vq.ema_update(z, out.indices);
  std::vector<float> cb = vq.codebook.to_vector<float>();
  std::vector<float> zs = z.to_vector<float>();
  std::set<int64_t> rows_used;
  for (int k = 2; k < 4; ++k) {
    // The code is exactly one of the batch's rows.
    int64_t found = -1;
    for (int64_t r = 0; r < 40; ++r)
      if (cb[size_t(2 * k)] == zs[size_t(2 * r)] && cb[size_t(2 * k + 1)] == zs[size_t(2 * r + 1)]) found = r;
    EXPECT_GE(found, 0) << "code " << k << " is not a batch row";
    rows_used.insert(found);
  }
  EXPECT_EQ(rows_used.size(), 2u);  // two different rows
  // Its statistics agree with it: cluster T / K with T the total before the
  // re-init (codes 0 and 1 plus the 0.5 each of codes 2 and 3), sum = row * T / K.
  std::vector<float> cs = vq.cluster_size.to_vector<float>();
  const double T = double(cs[0]) + double(cs[1]) + 1.0;
  EXPECT_NEAR(cs[2], T / 4, 1e-5);
  EXPECT_NEAR(cs[3], T / 4, 1e-5);
  std::vector<float> es = vq.embed_sum.to_vector<float>();
  EXPECT_NEAR(es[4], cb[4] * T / 4, 1e-4);
  EXPECT_EQ(vq.stats(out.indices).dead, 0);
  // Selectable at the next forward: the replaced row maps to its new code
  // (or to one exactly as near).
  auto again = vq.forward(z);
  std::vector<int64_t> idx = again.indices.to_vector<int64_t>();
  for (int64_t r : rows_used) {
    Tensor row = z.select(0, r);
    EXPECT_TRUE(equal(vq.lookup(again.indices.select(0, r)), row));
    EXPECT_GE(idx[size_t(r)], 2);
  }
}

TEST(VectorQuantizer, ReinitIsNotUndoneByTheNextUpdate) {
  VectorQuantizer vq(4, 2, {.decay = 0.5, .dead_code_threshold = 0.05, .highest_norm_init = false, .seed = 1});
  set_codebook(vq, tensor<float>({1, 1, -1, -1, 100, 100, -100, 100}, {4, 2}));
  Generator gen(8);
  Tensor z = randn({40, 2}, gen);
  vq.ema_update(z, vq.encode(z));
  Tensor reset = vq.codebook.clone();
  EXPECT_FALSE(all_close(reset.narrow(0, 2, 2), tensor<float>({100, 100, -100, 100}, {2, 2})));
  // A batch that is code 0 forty times: codes 2 and 3 see no tokens this step.
  Tensor same = reset.select(0, 0).unsqueeze(0).expand({40, 2}).contiguous();
  Tensor idx = vq.encode(same);
  for (int64_t i : idx.to_vector<int64_t>()) ASSERT_EQ(i, 0);
  vq.ema_update(same, idx);
  // They stay where the re-init put them (up to eps smoothing), not pulled
  // back towards (100, 100) or (-100, 100) by stale sums.
  for (int k = 2; k < 4; ++k) EXPECT_TRUE(all_close(vq.codebook.select(0, k), reset.select(0, k), 1e-4, 1e-5));
}

TEST(VectorQuantizer, DeadThresholdDoesNotDependOnBatchSize) {
  // decay 0: cluster sizes are this batch's counts. 30 tokens at code 0, 19 at
  // code 1, 1 at code 2 (a 2% share), none at code 3. Threshold 5%: codes 2
  // and 3 are dead at batch 50 and at batch 100 alike (a count threshold of
  // 2 tokens would flag code 2 at 50 and spare it at 100).
  std::vector<float> rows;
  for (int i = 0; i < 30; ++i) rows.insert(rows.end(), {1, 1});
  for (int i = 0; i < 19; ++i) rows.insert(rows.end(), {-1, -1});
  rows.insert(rows.end(), {10, 10});
  Tensor z50 = tensor<float>(rows, {50, 2});
  Tensor z100 = cat({z50, z50}, 0);
  for (const Tensor& z : {z50, z100}) {
    VectorQuantizer vq(4, 2, {.decay = 0, .dead_code_threshold = 0.05, .highest_norm_init = false});
    set_codebook(vq, tensor<float>({1, 1, -1, -1, 10, 10, -50, 50}, {4, 2}));
    vq.ema_update(z, vq.encode(z));
    const double T = double(z.size(0));
    std::vector<float> cs = vq.cluster_size.to_vector<float>();
    EXPECT_NEAR(cs[0], 30 * T / 50, 1e-4);
    EXPECT_NEAR(cs[2], T / 4, 1e-4) << "code 2 was not re-seeded at batch " << z.size(0);
    EXPECT_NEAR(cs[3], T / 4, 1e-4);
  }
}

TEST(VectorQuantizer, StatsAndBuffers) {
  VectorQuantizer vq(4, 2, kPlain);
  nn::VQStats s = vq.stats(tensor<int64_t>({0, 0, 1, 1}));
  EXPECT_EQ(s.used, 2);
  EXPECT_DOUBLE_EQ(s.usage, 0.5);
  EXPECT_NEAR(s.perplexity, 2.0, 1e-12);
  EXPECT_NEAR(vq.stats(tensor<int64_t>({0, 1, 2, 3})).perplexity, 4.0, 1e-12);
  EXPECT_EQ(state_dict_keys(vq), (std::vector<std::string>{"codebook", "cluster_size", "embed_sum", "initialized"}));
  EXPECT_EQ(vq.num_parameters(), 0);
  // A state dict round trip carries the codebook and its statistics.
  VectorQuantizer other(4, 2, {.seed = 9});
  other.load_state_dict(vq.state_dict());
  EXPECT_TRUE(equal(other.codebook, vq.codebook));
  EXPECT_TRUE(equal(other.embed_sum, vq.embed_sum));
}

TEST(VectorQuantizer, BadInputIsAnErrorAndChangesNothing) {
  VectorQuantizer vq(4, 3, {.highest_norm_init = false});
  Generator gen(2);
  Tensor z = randn({5, 3}, gen);
  auto snapshot = vq.state_dict();
  auto unchanged = [&] {
    for (const auto& [k, v] : vq.state_dict()) EXPECT_TRUE(equal(v, snapshot.at(k))) << k;
  };
  EXPECT_KILN_ERROR(vq.forward(randn({5, 4}, gen)), "must end in dim 3");
  EXPECT_KILN_ERROR(vq.forward(z.to(kF64)), "codebook's dtype f32");
  EXPECT_KILN_ERROR(vq.lookup(tensor<int64_t>({0, 4})), "outside [0, 4)");
  EXPECT_KILN_ERROR(vq.lookup(tensor<int64_t>({-1})), "outside [0, 4)");
  EXPECT_KILN_ERROR(vq.lookup(z), "must be i64 or i32");
  EXPECT_KILN_ERROR(vq.ema_update(z, tensor<int64_t>({0, 1, 2, 3, 4})), "outside [0, 4)");
  EXPECT_KILN_ERROR(vq.ema_update(z, tensor<int64_t>({0, 1, 2})), "must have the shape of z");
  EXPECT_KILN_ERROR(vq.ema_update(randn({5, 2}, gen), tensor<int64_t>({0, 1, 2, 3, 0})), "must end in dim 3");
  vq.eval();
  EXPECT_KILN_ERROR(vq.ema_update(z, vq.encode(z)), "eval mode");
  unchanged();
  EXPECT_KILN_ERROR(VectorQuantizer(0, 3), "must be positive");
  EXPECT_KILN_ERROR(VectorQuantizer(4, 3, {.decay = 1.0}), "decay");
}

// ---- ResidualVQ ----

TEST(ResidualVQ, MatchesGolden) {
  const auto& g = golden("vq")["rvq"];
  ResidualVQ rvq(g["L"], g["K"], g["D"], kPlain);
  for (int q = 0; q < int(g["L"]); ++q) set_codebook(rvq.level(q), golden_tensor(g["codebooks"][size_t(q)]));
  Tensor z = golden_tensor(g["z"]);
  auto out = rvq.forward(z);
  EXPECT_TRUE(equal(out.indices, golden_tensor(g["indices"])));
  EXPECT_TRUE(all_close(out.quantized.detach(), golden_tensor(g["quantized"]), 1e-6, 1e-7));
  EXPECT_NEAR(out.commitment_loss.item<float>(), double(g["loss"]), 1e-6 * double(g["loss"]));
  rvq.ema_update(z, out.indices);
  for (int q = 0; q < int(g["L"]); ++q)
    EXPECT_TRUE(all_close(rvq.level(q).codebook, golden_tensor(g["after"][size_t(q)]), 1e-6, 1e-7)) << "level " << q;
  EXPECT_EQ(state_dict_keys(rvq)[0], "levels.0.codebook");
}

TEST(ResidualVQ, DecodeOfEncodeIsTheQuantizedOutputBitwise) {
  ResidualVQ rvq(4, 16, 8);
  Generator gen(4);
  Tensor z = randn({3, 20, 8}, gen).requires_grad_();
  auto out = rvq.forward(z);  // seeds every level from this batch
  EXPECT_EQ(out.indices.shape(), (Shape{3, 20, 4}));
  EXPECT_TRUE(equal(rvq.decode(rvq.encode(z)), out.quantized.detach()));
  EXPECT_TRUE(equal(rvq.decode(out.indices), out.quantized.detach()));
  // Straight-through on the total: the gradient reaches z unchanged.
  Tensor c = randn({3, 20, 8}, gen);
  sum(mul(out.quantized, c)).backward();
  EXPECT_TRUE(equal(z.grad(), c));
  // A prefix of the levels is their sum only.
  Tensor one = rvq.decode(out.indices, 1);
  EXPECT_TRUE(equal(one, rvq.level(0).lookup(out.indices.select(-1, 0))));
  EXPECT_TRUE(equal(rvq.decode(out.indices.narrow(-1, 0, 2)), rvq.decode(out.indices, 2)));
}

TEST(ResidualVQ, MseFallsStrictlyWithEachLevel) {
  ResidualVQ rvq(4, 32, 8);
  Generator gen(6);
  Tensor z = randn({512, 8}, gen);
  // Seeded from the highest-norm rows, then 30 EMA steps (k-means-like) move
  // the codes to their clusters' means: a freshly seeded level holds outliers,
  // chosen for being alive and distinct, not for being near typical rows.
  for (int step = 0; step < 30; ++step) {
    auto o = rvq.forward(z);
    rvq.ema_update(z, o.indices);
  }
  auto out = rvq.forward(z);
  double prev = mean(square(z)).item<float>();
  for (int64_t l = 1; l <= 4; ++l) {
    const double mse = mean(square(sub(z, rvq.decode(out.indices, l)))).item<float>();
    EXPECT_LT(mse, prev) << "levels " << l;
    prev = mse;
  }
}

TEST(ResidualVQ, DeeperLevelGetsDistinctNonZeroCodesWhenLevelZeroIsExact) {
  // The K highest-norm rows come first and level 0 takes exactly them: their
  // residual is 0. A first-K init would give level 1 K zero codes.
  const int64_t K = 8;
  Generator gen(12);
  Tensor big = mul(randn({K, 4}, gen), 100.0);
  Tensor small = randn({3 * K, 4}, gen);
  Tensor z = cat({big, small}, 0);
  ResidualVQ rvq(2, K, 4);
  auto out = rvq.forward(z);
  // Level 0 reproduces the first K rows exactly.
  EXPECT_TRUE(equal(rvq.decode(out.indices, 1).narrow(0, 0, K), big));
  std::vector<float> cb = rvq.level(1).codebook.to_vector<float>();
  std::set<std::vector<float>> distinct;
  for (int64_t k = 0; k < K; ++k) {
    std::vector<float> row(cb.begin() + k * 4, cb.begin() + (k + 1) * 4);
    EXPECT_GT(std::abs(row[0]) + std::abs(row[1]) + std::abs(row[2]) + std::abs(row[3]), 0.0f) << "code " << k;
    distinct.insert(row);
  }
  EXPECT_EQ(int64_t(distinct.size()), K);
}

TEST(ResidualVQ, CommitmentOnTheTotalGradcheckF64) {
  ResidualVQ rvq(3, 8, 3, kPlain);
  rvq.to(kF64);
  Tensor z = leaf({6, 3}, 21, -2, 2);
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return rvq.forward(in[0]).commitment_loss; }, {z});
  auto out = rvq.forward(z);
  Tensor want = mul(mean(square(sub(z.detach(), rvq.decode(out.indices)))), 0.25);
  EXPECT_TRUE(equal(out.commitment_loss.detach(), want));
}

TEST(VectorQuantizer, LookupTakesI32AndI64) {
  VectorQuantizer vq(5, 2, kPlain);
  Tensor i64 = tensor<int64_t>({4, 0, 2, 2}, {2, 2});
  Tensor codes = vq.lookup(i64);
  EXPECT_EQ(codes.shape(), (Shape{2, 2, 2}));
  EXPECT_TRUE(equal(codes, vq.lookup(i64.to(kI32))));
  EXPECT_TRUE(equal(codes.select(0, 0).select(0, 0), vq.codebook.select(0, 4)));
}

TEST(ResidualVQ, BadInputIsAnErrorAndChangesNothing) {
  ResidualVQ rvq(2, 4, 3, {.highest_norm_init = false});
  Generator gen(2);
  Tensor z = randn({5, 3}, gen);
  Tensor idx = rvq.encode(z);
  auto snapshot = rvq.state_dict();
  EXPECT_KILN_ERROR(rvq.decode(idx, 3), "levels 3 must be in [1, 2]");
  EXPECT_KILN_ERROR(rvq.decode(tensor<int64_t>({0, 4}, {1, 2})), "outside [0, 4)");
  EXPECT_KILN_ERROR(rvq.decode(idx.narrow(-1, 0, 1), 2), "fewer than the 2 asked for");
  EXPECT_KILN_ERROR(rvq.forward(randn({5, 2}, gen)), "must end in dim 3");
  // The second level's index is out of range: level 0 must not be updated either.
  Tensor bad = idx.clone();
  NoGradGuard g;
  fill_(bad.select(-1, 1), 7);
  EXPECT_KILN_ERROR(rvq.ema_update(z, bad), "outside [0, 4)");
  EXPECT_KILN_ERROR(rvq.ema_update(z, idx.narrow(-1, 0, 1)), "levels");
  for (const auto& [k, v] : rvq.state_dict()) EXPECT_TRUE(equal(v, snapshot.at(k))) << k;
}

}  // namespace
}  // namespace kiln::testing
