// Tests of the 2x2 stride-2 max-pooling kernels (NOTE [2x2 max pooling] in
// src/backend/cpu/nn/pool.h): values, taps expanded to indices and the gradient
// against backend::cpu::ref and the general kernels, on shapes that take the fast
// path (short rows, rows of several blocks, odd H / W, the last row pair of
// the tensor) and ones that fall back; f64 gradchecks through the op.
#include <cmath>
#include <optional>

#include "src/backend/cpu/nn/pool.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;

backend::cpu::MaxPoolGeom geom_2x2(int64_t N, int64_t H, int64_t W) {
  backend::cpu::MaxPoolGeom g;
  g.N = N, g.H = H, g.W = W, g.OH = H / 2, g.OW = W / 2;
  g.kh = g.kw = g.sh = g.sw = 2;
  return g;
}

TEST(PoolFast, TwoByTwoMatchesRef) {
  Generator gen(11);
  auto pick = [&](int64_t lo, int64_t hi) { return lo + randint(0, hi - lo + 1, {}, gen).item<int64_t>(); };
  for (int i = 0; i < 48; ++i) {
    for (DType t : {kF32, kF64, kBF16}) {
      // Widths cover OW < 8 (a short row), 8..15 (two overlapping blocks)
      // and long rows; odd H and W leave a row / column no window reads.
      const int64_t N = pick(1, 4), H = pick(2, 11);
      const int64_t W = i % 3 == 0 ? pick(2, 15) : i % 3 == 1 ? pick(16, 31) : pick(2, 70);
      Tensor x = to(randn({N, H, W}, gen), t);
      if (i % 3 == 0) x = to(randint(0, 3, {N, H, W}, gen), t);                  // ties: the first tap
      if (i % 4 == 0) x = masked_fill(x, lt(rand({N, H, W}, gen), 0.15), NAN);  // NaNs: the last one
      if (i % 2) x = noncontiguous(x);
      const backend::cpu::MaxPoolGeom g = geom_2x2(N, H, W);
      ASSERT_TRUE(backend::cpu::is_max_pool_2x2(g));
      SCOPED_TRACE(fmt::format("case {} {}: N {} H {} W {}", i, name(t), N, H, W));
      Tensor v = empty({N, g.OH, g.OW}, {.dtype = t}), taps = empty({N, g.OH, g.OW}, {.dtype = kU8});
      Tensor idx = empty({N, g.OH, g.OW}, {.dtype = kI64});
      Tensor rv = empty({N, g.OH, g.OW}, {.dtype = t}), ridx = empty({N, g.OH, g.OW}, {.dtype = kI64});
      backend::cpu::max_pool2d_2x2(g, x, v, taps);
      backend::cpu::max_pool2d_2x2_indices(g, taps, idx);
      backend::cpu::ref::max_pool2d(g, x, rv, ridx);
      EXPECT_TRUE(equal(v, rv)) << "values";
      EXPECT_TRUE(equal(idx, ridx)) << "indices";
      // The backward writes every input element: start from NaN garbage.
      Tensor gy = to(randn({N, g.OH, g.OW}, gen), t);
      Tensor gx = full({N, H, W}, NAN, {.dtype = t}), rgx = empty({N, H, W}, {.dtype = t});
      backend::cpu::max_pool2d_2x2_backward(g, gy, taps, gx);
      backend::cpu::max_pool2d_backward(g, gy, ridx, rgx);
      EXPECT_TRUE(equal(gx, rgx)) << "grad";
    }
  }
}

TEST(PoolFast, OnlyNonOverlappingInteriorWindowsTakeTheFastPath) {
  backend::cpu::MaxPoolGeom g = geom_2x2(2, 28, 28);
  EXPECT_TRUE(backend::cpu::is_max_pool_2x2(g));
  backend::cpu::MaxPoolGeom s = g;
  s.sh = 1, s.OH = 27;
  EXPECT_FALSE(backend::cpu::is_max_pool_2x2(s));  // overlapping rows
  backend::cpu::MaxPoolGeom p = g;
  p.ph = p.pw = 1, p.OH = p.OW = 15;
  EXPECT_FALSE(backend::cpu::is_max_pool_2x2(p));  // padding
  backend::cpu::MaxPoolGeom d = g;
  d.dw = 2, d.OW = 13;
  EXPECT_FALSE(backend::cpu::is_max_pool_2x2(d));  // dilation
  backend::cpu::MaxPoolGeom c = geom_2x2(2, 7, 9);
  c.OH = 4, c.OW = 5;
  EXPECT_FALSE(backend::cpu::is_max_pool_2x2(c));  // ceil_mode: a last window past the input
  backend::cpu::MaxPoolGeom k = g;
  k.kh = k.kw = k.sh = k.sw = 3, k.OH = k.OW = 9;
  EXPECT_FALSE(backend::cpu::is_max_pool_2x2(k));
}

// The op, fast path and fallbacks, against backend::cpu::ref and the general scatter;
// on 1 to 3 threads, so that row pairs split into tasks whose boundaries the
// short-row blocks must not write across.
TEST(PoolFast, OpMatchesRefOnCnnShapesAndFallbacks) {
  Generator gen(12);
  const int threads_before = get_num_threads();
  struct Case {
    Shape shape;
    Size2 k;
    std::optional<Size2> s;  // std::nullopt: the kernel size
    Size2 p;
    bool ceil;
  };
  const std::vector<Case> cases = {
      {{8, 32, 28, 28}, 2, std::nullopt, 0, false},  // cnn_b64's first pool: OW 14
      {{8, 64, 14, 14}, 2, std::nullopt, 0, false},  // its second: OW 7, short rows
      {{3, 5, 9, 7}, 2, std::nullopt, 0, false},     // odd H and W
      {{3, 5, 9, 7}, 2, std::nullopt, 0, true},      // ceil_mode: falls back
      {{2, 3, 8, 8}, 2, 1, 0, false},                // stride 1: falls back
      {{2, 3, 8, 8}, 2, 2, 1, false},                // padding: falls back
      {{4, 64, 15, 13}, 2, std::nullopt, 0, false},  // odd H and W, many tasks
      {{2, 256, 6, 6}, 2, std::nullopt, 0, false},   // OW 3: single outputs
  };
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    for (const Case& c : cases) {
      const Size2 stride = c.s.value_or(c.k);
      SCOPED_TRACE(fmt::format("{} threads, {} k {} s {} p {} ceil {}", threads, to_string(c.shape), c.k.h, stride.h,
                               c.p.h, c.ceil));
      Tensor x = randn(c.shape, gen).requires_grad_();
      auto [y, idx] = max_pool2d_with_indices(x, c.k, c.s, c.p, 1, c.ceil);
      const int64_t B = c.shape[0], C = c.shape[1], H = c.shape[2], W = c.shape[3];
      backend::cpu::MaxPoolGeom g;
      g.N = B * C, g.H = H, g.W = W, g.OH = y.shape()[2], g.OW = y.shape()[3];
      g.kh = c.k.h, g.kw = c.k.w, g.ph = c.p.h, g.pw = c.p.w;
      g.sh = stride.h, g.sw = stride.w;
      Tensor rv = empty(y.shape()), ridx = empty(y.shape(), {.dtype = kI64});
      backend::cpu::ref::max_pool2d(g, x.detach(), rv, ridx);
      EXPECT_TRUE(equal(y.detach(), rv)) << "values";
      EXPECT_TRUE(equal(idx, ridx)) << "indices";
      EXPECT_TRUE(equal(max_pool2d(x, c.k, c.s, c.p, 1, c.ceil).detach(), rv)) << "values without indices";
      Tensor gy = randn(y.shape(), gen);
      y.backward(gy);
      Tensor rgx = empty(c.shape);
      backend::cpu::max_pool2d_backward(g, gy, ridx, rgx);
      EXPECT_TRUE(equal(x.grad(), rgx)) << "grad";
    }
  }
  set_num_threads(threads_before);
}

TEST(PoolFast, GradcheckFirstAndSecondOrder) {
  uint64_t seed = 900;
  for (bool nc : {false, true}) {
    SCOPED_TRACE(nc ? "non-contiguous" : "contiguous");
    auto in = [&](const Shape& s) { Tensor x = leaf(s, ++seed); return nc ? noncontiguous(x) : x; };
    auto pool = [](const std::vector<Tensor>& v) { return max_pool2d(v[0], 2); };
    EXPECT_GRADCHECK(pool, {in({2, 3, 6, 8})});
    EXPECT_GRADCHECK(pool, {in({1, 2, 5, 7})});   // odd H, W: unread row and column get zero
    EXPECT_GRADCHECK(pool, {in({1, 2, 4, 20})});  // a row of two overlapping blocks
    EXPECT_GRADCHECK(pool, {in({3, 6, 9})});      // unbatched
    const GradcheckResult r = gradcheck_second_order(pool, {in({1, 2, 4, 6})});
    EXPECT_TRUE(r.ok) << r.message;
  }
}

}  // namespace
}  // namespace kiln
