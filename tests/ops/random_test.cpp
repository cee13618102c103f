// Philox generator (known answers from Random123), the layout of draws in the
// word stream, statistics of each distribution, thread-count independence,
// state save/restore, Rngs streams, and the fast kernels against ref::.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "src/backend/cpu/random/random.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;

struct ThreadCount {  // restores the thread count at scope exit
  int saved = get_num_threads();
  ~ThreadCount() { set_num_threads(saved); }
};

double mean_of(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / double(v.size()); }
double var_of(const std::vector<double>& v) {
  double m = mean_of(v), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / double(v.size() - 1);
}
// Pearson's chi-square of bin counts against a uniform expectation.
double chi_square(const std::vector<int64_t>& counts) {
  double total = double(std::accumulate(counts.begin(), counts.end(), int64_t(0)));
  double expect = total / double(counts.size()), chi = 0;
  for (int64_t c : counts) chi += (double(c) - expect) * (double(c) - expect) / expect;
  return chi;
}
double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

TEST(Philox, KnownAnswersFromRandom123) {
  using W = std::array<uint32_t, 4>;
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (W{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (W{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (W{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Generator, BlocksStateAndAdvance) {
  Generator g(0x0123456789abcdefull);
  EXPECT_EQ(g.seed(), 0x0123456789abcdefull);
  EXPECT_EQ(g.offset(), 0u);
  EXPECT_EQ(g.block(5), philox4x32_10({5, 0, 0, 0}, {0x89abcdef, 0x01234567}));
  EXPECT_EQ(g.block(uint64_t(1) << 32), philox4x32_10({0, 1, 0, 0}, {0x89abcdef, 0x01234567}));
  EXPECT_EQ(g.advance(3), 0u);
  EXPECT_EQ(g.advance(2), 3u);
  EXPECT_EQ(g.offset(), 5u);
  auto b = g.block(5);
  EXPECT_EQ(g.next_u64(), uint64_t(b[0]) | (uint64_t(b[1]) << 32));
  EXPECT_EQ(g.offset(), 6u);
  GeneratorState s = g.state();
  g.manual_seed(7);
  EXPECT_EQ(g.state(), (GeneratorState{7, 0}));
  g.set_state(s);
  EXPECT_EQ(g.offset(), 6u);
}

// NOTE: these pin the documented layout of src/backend/cpu/random/random.h.
TEST(Random, UniformLayoutInTheWordStream) {
  Generator g(42);
  g.advance(3);
  Tensor r = rand({10}, g);  // f32: element i is word i, 24 bits
  Generator ref(42);
  for (int64_t i = 0; i < 10; ++i) {
    uint32_t w = ref.block(3 + uint64_t(i) / 4)[size_t(i % 4)];
    EXPECT_EQ(r[i].item<float>(), float(w >> 8) * 0x1p-24f) << i;
  }
  EXPECT_EQ(g.offset(), 3u + 3u);  // ceil(10 / 4) blocks
  Tensor d = rand({3}, g, {.dtype = kF64});  // f64: words 2i (low), 2i+1 (high), 53 bits
  for (int64_t i = 0; i < 3; ++i) {
    auto blk = ref.block(6 + uint64_t(i) / 2);
    uint64_t bits = uint64_t(blk[size_t(2 * (i % 2))]) | (uint64_t(blk[size_t(2 * (i % 2) + 1)]) << 32);
    EXPECT_EQ(d[i].item<double>(), double(bits >> 11) * 0x1p-53) << i;
  }
  EXPECT_EQ(g.offset(), 8u);
}

TEST(Random, GeneratorAdvancesByBlocksUsed) {
  Generator g(1);
  randn({5}, g);  // f32: 3 Box–Muller pairs -> 6 words -> 2 blocks
  EXPECT_EQ(g.offset(), 2u);
  randn({5}, g, {.dtype = kF64});  // 3 pairs x 4 words -> 3 blocks
  EXPECT_EQ(g.offset(), 5u);
  randint(0, 10, {9}, g);  // 1 word each
  EXPECT_EQ(g.offset(), 8u);
  randint(0, int64_t(1) << 40, {3}, g);  // 2 words each
  EXPECT_EQ(g.offset(), 10u);
  bernoulli({4}, 0.5, g);
  EXPECT_EQ(g.offset(), 11u);
  randperm(5, g);  // 4 steps x 2 words
  EXPECT_EQ(g.offset(), 13u);
  rand({0}, g);
  EXPECT_EQ(g.offset(), 13u);
}

TEST(Random, UniformStatistics) {
  Generator g(123);
  for (DType dt : {kF32, kF64, kBF16}) {
    auto v = rand({100000}, g, {.dtype = dt}).to_vector<double>();
    EXPECT_NEAR(mean_of(v), 0.5, 0.005) << name(dt);
    EXPECT_NEAR(var_of(v), 1.0 / 12, 0.002) << name(dt);
    std::vector<int64_t> bins(16);
    for (double x : v) {
      ASSERT_GE(x, 0.0);
      ASSERT_LT(x, 1.0);
      bins[size_t(x * 16)]++;
    }
    // 15 degrees of freedom: P(chi2 > 45) < 1e-4.
    EXPECT_LT(chi_square(bins), 45.0) << name(dt);
  }
}

TEST(Random, NormalStatistics) {
  Generator g(321);
  for (DType dt : {kF32, kF64, kBF16}) {
    auto v = randn({100001}, g, {.dtype = dt}).to_vector<double>();
    EXPECT_NEAR(mean_of(v), 0.0, 0.02) << name(dt);
    EXPECT_NEAR(var_of(v), 1.0, 0.02) << name(dt);
    // Kolmogorov–Smirnov-style bound on the empirical CDF at fixed points
    // (1.95 / sqrt(n) is the 0.1% critical value; bf16 rounding adds a bit).
    std::sort(v.begin(), v.end());
    for (double x : {-2.5, -1.5, -0.7, 0.3, 1.1, 2.2}) {
      double ecdf = double(std::lower_bound(v.begin(), v.end(), x) - v.begin()) / double(v.size());
      EXPECT_NEAR(ecdf, normal_cdf(x), dt == kBF16 ? 0.01 : 1.95 / std::sqrt(double(v.size())))
          << name(dt) << " at " << x;
    }
  }
  // Odd and tiny sizes.
  EXPECT_EQ(randn({1}, g).numel(), 1);
  EXPECT_EQ(randn({3}, g, {.dtype = kF64}).numel(), 3);
}

TEST(Random, InPlaceFills) {
  Generator g(9);
  Tensor x = empty({50000}, {.dtype = kF64});
  uint64_t v0 = x.storage()->version();
  Tensor same = uniform_(x, -2.0, 5.0, g);
  EXPECT_TRUE(same.is_same(x));
  EXPECT_EQ(x.storage()->version(), v0 + 1);
  auto u = x.to_vector<double>();
  EXPECT_GE(*std::min_element(u.begin(), u.end()), -2.0);
  EXPECT_LT(*std::max_element(u.begin(), u.end()), 5.0);
  EXPECT_NEAR(mean_of(u), 1.5, 0.05);
  normal_(x, 3.0, 2.0, g);
  auto n = x.to_vector<double>();
  EXPECT_NEAR(mean_of(n), 3.0, 0.05);
  EXPECT_NEAR(std::sqrt(var_of(n)), 2.0, 0.05);
  // std 0 and low == high are allowed and exact.
  normal_(x, 1.25, 0.0, g);
  EXPECT_EQ(x.to_vector<double>(), std::vector<double>(50000, 1.25));
  uniform_(x, 4.0, 4.0, g);
  EXPECT_EQ(x.to_vector<double>()[7], 4.0);
}

TEST(Random, InPlaceFillOfNonContiguousFollowsLogicalOrder) {
  Generator g1(77), g2(77);
  Tensor x = empty({3, 4}).t();  // [4, 3], transposed strides
  uniform_(x, 0.0, 1.0, g1);
  EXPECT_EQ(x.to_vector<float>(), rand({4, 3}, g2).to_vector<float>());
  EXPECT_EQ(g1.state(), g2.state());
  Tensor y = zeros({4, 6}).slice(1, 0, 6, 2);  // every other column
  normal_(y, 0.0, 1.0, g1);
  EXPECT_EQ(y.to_vector<float>(), randn({4, 3}, g2).to_vector<float>());
}

TEST(Random, UniformStaysBelowHighAfterRounding) {
  Generator g(5);
  Tensor b = rand({100000}, g, {.dtype = kBF16});
  auto bv = b.to_vector<float>();
  EXPECT_LT(*std::max_element(bv.begin(), bv.end()), 1.0f);
  Tensor x = empty({100000});
  uniform_(x, 1.0, 1.0 + 1e-7, g);  // a range of one f32 ulp
  for (float v : x.to_vector<float>()) ASSERT_TRUE(v >= 1.0f && v < float(1.0 + 1e-7)) << v;
  Tensor h = empty({100000}, {.dtype = kBF16});
  uniform_(h, -1.0, 8.0, g);
  for (float v : h.to_vector<float>()) ASSERT_TRUE(v >= -1.0f && v < 8.0f) << v;
}

TEST(Random, RandintStatistics) {
  Generator g(11);
  Tensor r = randint(3, 13, {100000}, g);
  EXPECT_EQ(r.dtype(), kI64);
  std::vector<int64_t> counts(10);
  for (int64_t v : r.to_vector<int64_t>()) {
    ASSERT_GE(v, 3);
    ASSERT_LT(v, 13);
    counts[size_t(v - 3)]++;
  }
  EXPECT_LT(chi_square(counts), 33.7);  // 9 dof, P < 1e-4
  // Negative bounds, other dtypes.
  for (int64_t v : randint(-5, -2, {1000}, g, {.dtype = kI32}).to_vector<int64_t>()) ASSERT_TRUE(v >= -5 && v < -2);
  for (int64_t v : randint(0, 256, {1000}, g, {.dtype = kU8}).to_vector<int64_t>()) ASSERT_TRUE(v >= 0 && v < 256);
  Tensor f = randint(0, 4, {1000}, g, {.dtype = kF32});
  for (float v : f.to_vector<float>()) ASSERT_TRUE(v == 0 || v == 1 || v == 2 || v == 3);
  // A range wider than 2^32 uses 64 random bits: the top half gets used.
  int64_t high = int64_t(1) << 50;
  auto wide = randint(0, high, {20000}, g).to_vector<int64_t>();
  int64_t above = std::count_if(wide.begin(), wide.end(), [&](int64_t v) { return v >= high / 2; });
  for (int64_t v : wide) ASSERT_TRUE(v >= 0 && v < high);
  EXPECT_NEAR(double(above) / 20000, 0.5, 0.02);
  // The full int64 range.
  auto full = randint(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), {1000}, g);
  auto fv = full.to_vector<int64_t>();
  EXPECT_TRUE(std::any_of(fv.begin(), fv.end(), [](int64_t v) { return v < 0; }));
  EXPECT_TRUE(std::any_of(fv.begin(), fv.end(), [](int64_t v) { return v > 0; }));
}

TEST(Random, Bernoulli) {
  Generator g(13);
  auto v = bernoulli({100000}, 0.3, g).to_vector<double>();
  EXPECT_NEAR(mean_of(v), 0.3, 0.006);
  for (double x : v) ASSERT_TRUE(x == 0.0 || x == 1.0);
  EXPECT_EQ(bernoulli({100}, 1.0, g, {.dtype = kBool}).to_vector<bool>(), std::vector<bool>(100, true));
  EXPECT_EQ(bernoulli({100}, 0.0, g, {.dtype = kI64}).to_vector<int64_t>(), std::vector<int64_t>(100, 0));
  // Elementwise probabilities, given as a non-contiguous f64 tensor.
  Tensor p = tensor<double>({0.0, 1.0, 0.5, 0.9}, {2, 2}).t();
  Tensor big = p.reshape({4}).unsqueeze(0).expand({20000, 4});
  Tensor draw = bernoulli(big, g);
  EXPECT_EQ(draw.dtype(), kF64);
  EXPECT_EQ(draw.shape(), (Shape{20000, 4}));
  std::vector<int64_t> ones(4, 0);
  auto dv = draw.to_vector<double>();
  for (size_t i = 0; i < dv.size(); ++i) ones[i % 4] += int64_t(dv[i]);
  // p.t() is [[0, 0.5], [1, 0.9]] -> flattened 0, 0.5, 1, 0.9.
  EXPECT_EQ(ones[0], 0);
  EXPECT_NEAR(double(ones[1]) / 20000, 0.5, 0.015);
  EXPECT_EQ(ones[2], 20000);
  EXPECT_NEAR(double(ones[3]) / 20000, 0.9, 0.01);
}

TEST(Random, Randperm) {
  Generator g(17);
  EXPECT_EQ(randperm(0, g).numel(), 0);
  EXPECT_EQ(randperm(1, g).to_vector<int64_t>(), std::vector<int64_t>{0});
  for (int64_t n : {2, 7, 1000}) {
    Tensor p = randperm(n, g);
    EXPECT_EQ(p.dtype(), kI64);
    auto v = p.to_vector<int64_t>();
    std::sort(v.begin(), v.end());
    std::vector<int64_t> iota(static_cast<size_t>(n));
    std::iota(iota.begin(), iota.end(), 0);
    EXPECT_EQ(v, iota);
  }
  // Each value lands in each position about equally often.
  std::vector<int64_t> first(6);
  for (int i = 0; i < 12000; ++i) first[size_t(randperm(6, g)[0].item<int64_t>())]++;
  EXPECT_LT(chi_square(first), 25.7);  // 5 dof, P < 1e-4
}

TEST(Random, SameValuesForOneAndTwoThreads) {
  ThreadCount restore;
  const Shape shape{(1 << 20) + 13};  // far beyond the parallel grain
  auto draw_all = [&](int threads) {
    set_num_threads(threads);
    Generator g(2024);
    std::vector<Tensor> out;
    out.push_back(rand(shape, g));
    out.push_back(rand(shape, g, {.dtype = kF64}));
    out.push_back(randn(shape, g));
    out.push_back(randn(shape, g, {.dtype = kF64}));
    out.push_back(randn(shape, g, {.dtype = kBF16}));
    out.push_back(randint(-100, 100, shape, g));
    out.push_back(bernoulli(shape, 0.25, g));
    out.push_back(bernoulli(rand(shape, g), g));
    Tensor x = empty(shape);
    out.push_back(uniform_(x, -1, 1, g));
    out.push_back(scalar_tensor(int64_t(g.offset())));
    return out;
  };
  auto one = draw_all(1), two = draw_all(2);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(equal(one[i], two[i])) << "draw " << i;
}

TEST(Random, SaveAndRestoreReplays) {
  Generator g(99);
  rand({7}, g);
  GeneratorState saved = g.state();
  Tensor a = randn({1000}, g);
  Tensor b = randint(0, 1000, {33}, g);
  Tensor c = randn({1000}, g);
  EXPECT_FALSE(equal(a, c));  // consecutive draws differ
  g.set_state(saved);
  EXPECT_TRUE(equal(randn({1000}, g), a));
  EXPECT_TRUE(equal(randint(0, 1000, {33}, g), b));
  EXPECT_TRUE(equal(randn({1000}, g), c));
  // A copy of the generator is an independent replay.
  Generator copy = g;
  EXPECT_TRUE(equal(rand({5}, copy), rand({5}, g)));
  // Different seeds give different streams.
  Generator g1(1), g2(2);
  EXPECT_FALSE(equal(rand({16}, g1), rand({16}, g2)));
}

TEST(Random, Errors) {
  Generator g(3);
  EXPECT_KILN_ERROR(rand({2}, g, {.dtype = kI64}), "[rand] dtype i64 is not a floating-point type");
  EXPECT_KILN_ERROR(randn({2, -3}, g), "[randn] negative size -3 in shape [2, -3]");
  EXPECT_KILN_ERROR(randint(5, 5, {2}, g), "[randint] low 5 must be less than high 5");
  EXPECT_KILN_ERROR(randint(0, 300, {2}, g, {.dtype = kU8}), "[randint] range [0, 300) does not fit dtype u8");
  EXPECT_KILN_ERROR(randint(0, 2, {2}, g, {.dtype = kBool}), "[randint] dtype bool is not supported");
  EXPECT_KILN_ERROR(bernoulli({2}, 1.5, g), "[bernoulli] p must be in [0, 1], got 1.5");
  EXPECT_KILN_ERROR(bernoulli(arange(3), g), "[bernoulli] p of shape [3] has dtype i64");
  EXPECT_KILN_ERROR(randperm(-1, g), "[randperm] n must be non-negative, got -1");
  EXPECT_KILN_ERROR(uniform_(empty({2}), 1.0, 0.0, g), "[uniform_] expects finite low <= high, got low 1 and high 0");
  EXPECT_KILN_ERROR(normal_(empty({2}), 0.0, -1.0, g), "[normal_] expects a finite mean and a finite std >= 0");
  EXPECT_KILN_ERROR(uniform_(zeros({2}, {.dtype = kI32}), 0, 1, g), "[uniform_] dtype i32 is not a floating-point type");
  EXPECT_KILN_ERROR(uniform_(zeros({1, 3}).expand({4, 3}), 0, 1, g),
                    "[uniform_] tensor of shape [4, 3] with strides [0, 1] has elements sharing memory");
  EXPECT_KILN_ERROR(normal_(zeros({3}, {.requires_grad = true}), 0, 1, g),
                    "[normal_] a leaf tensor of shape [3] that requires grad cannot be modified in place");
  EXPECT_EQ(g.offset(), 0u);  // failed calls consume nothing

  // Out-of-range probabilities: an error, and the generator is untouched.
  Tensor p = tensor<float>({0.5f, 1.5f, 0.2f});
  EXPECT_KILN_ERROR(bernoulli(p, g), "[bernoulli] p of shape [3] holds values outside [0, 1]");
  EXPECT_KILN_ERROR(bernoulli(tensor<double>({NAN}), g), "outside [0, 1] (or NaN)");
  EXPECT_EQ(g.offset(), 0u);
  Tensor untouched = tensor<float>({0.25f, 0.75f});
  uniform_(untouched, 0, 1, g);  // in place on a plain tensor works
  EXPECT_EQ(g.offset(), 1u);
}

TEST(RandomKernels, FastMatchesReference) {
  for (int64_t n : {1, 3, 4, 5, 63, 64, 65, 1000, 70001}) {
    for (DType dt : {kF32, kF64, kBF16}) {
      uint64_t seed = 1234 + uint64_t(n), first = 17;
      Tensor a = empty({n}, {.dtype = dt}), b = empty({n}, {.dtype = dt});
      backend::cpu::uniform(a, -3.0, 2.0, seed, first);
      backend::cpu::ref::uniform(b, -3.0, 2.0, seed, first);
      EXPECT_TRUE(equal(a, b)) << "uniform " << name(dt) << " n " << n;
      backend::cpu::normal(a, 0.5, 2.0, seed, first);
      backend::cpu::ref::normal(b, 0.5, 2.0, seed, first);
      // The fast kernel's log/sincos polynomials against libm's.
      double tol = dt == kF64 ? 1e-13 : dt == kF32 ? 5e-6 : 1e-2;
      EXPECT_TRUE(testing::all_close(a, b, tol, tol)) << "normal " << name(dt) << " n " << n;
      Tensor p = empty({n}, {.dtype = dt});
      backend::cpu::uniform(p, 0.0, 1.0, seed + 1, 0);
      backend::cpu::bernoulli(a, p, seed, first);
      backend::cpu::ref::bernoulli(b, p, seed, first);
      EXPECT_TRUE(equal(a, b)) << "bernoulli " << name(dt) << " n " << n;
    }
    for (uint64_t range : {uint64_t(1), uint64_t(10), uint64_t(1) << 32, (uint64_t(1) << 32) + 1, ~uint64_t(0)}) {
      Tensor a = empty({n}, {.dtype = kI64}), b = empty({n}, {.dtype = kI64});
      backend::cpu::randint(a, -7, range, 99, 3);
      backend::cpu::ref::randint(b, -7, range, 99, 3);
      EXPECT_TRUE(equal(a, b)) << "randint range " << range << " n " << n;
    }
  }
}

TEST(Rngs, NamedStreams) {
  Rngs rngs{{"params", 0}, {"dropout", 1}};
  EXPECT_TRUE(rngs.has("params"));
  EXPECT_FALSE(rngs.has("noise"));
  Generator p1 = rngs.next("params"), p2 = rngs.next("params");
  EXPECT_NE(p1.seed(), p2.seed());  // each next() is a fresh stream
  EXPECT_EQ(rngs.state().at("params").count, 2u);
  EXPECT_EQ(rngs.state().at("dropout").count, 0u);
  // A stream depends only on its own seed and count, not on other streams.
  Rngs other{{"params", 0}};
  EXPECT_EQ(other.next("params").seed(), p1.seed());
  Rngs reseeded{{"params", 5}};
  EXPECT_NE(reseeded.next("params").seed(), p1.seed());
  Generator d = rngs.next("dropout");
  EXPECT_NE(d.seed(), p1.seed());
  EXPECT_FALSE(equal(rand({8}, d), rand({8}, p1)));
  // Rngs(42) is the params stream.
  Rngs short_form(42);
  EXPECT_TRUE(short_form.has("params"));
  Rngs long_form{{"params", 42}};
  EXPECT_EQ(short_form.next("params").seed(), long_form.next("params").seed());
}

TEST(Rngs, MissingNameIsAnError) {
  Rngs rngs{{"params", 0}, {"dropout", 1}};
  EXPECT_KILN_ERROR(rngs.next("noise"), "[Rngs] no stream named 'noise' (streams: dropout, params)");
  EXPECT_KILN_ERROR(Rngs().next("params"), "[Rngs] no stream named 'params' (streams: none)");
  rngs.add("noise", 3);
  EXPECT_NO_THROW(rngs.next("noise"));
}

TEST(Rngs, StateRoundTrip) {
  Rngs rngs{{"params", 10}, {"dropout", 20}};
  rngs.next("params");
  auto saved = rngs.state();
  std::vector<uint64_t> first;
  for (int i = 0; i < 3; ++i) first.push_back(rngs.next(i % 2 ? "dropout" : "params").seed());
  Rngs restored;
  restored.set_state(saved);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(restored.next(i % 2 ? "dropout" : "params").seed(), first[size_t(i)]);
  EXPECT_EQ(restored.state(), rngs.state());
}

}  // namespace
}  // namespace kiln
