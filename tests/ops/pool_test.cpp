// Tests of max/avg/adaptive-avg pooling: PyTorch goldens (values, indices,
// gradients), the fast kernels against backend::cpu::ref on random shapes and
// layouts, tie and NaN rules, gradchecks in f64 (first and second order) and
// error messages.
#include <cmath>

#include "src/backend/cpu/nn/pool.h"
#include "tests/ops/window_args.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using nlohmann::json;
using namespace testing;


// (values, indices or undefined) of the kiln op a golden case names.
std::pair<Tensor, Tensor> call_pool(const std::string& op, const json& a, const Tensor& x) {
  auto get = [&](const char* k, json d) { return a.contains(k) ? a.at(k) : d; };
  // No stride in the case: PyTorch's stride=None, kiln's std::nullopt (the kernel size).
  auto stride2 = [&] { return a.contains("stride") ? std::optional<Size2>(size2(a.at("stride"))) : std::nullopt; };
  auto stride1 = [&] { return a.contains("stride") ? std::optional<int64_t>(int1(a.at("stride"))) : std::nullopt; };
  const bool ceil = get("ceil_mode", false).get<bool>(), incl = get("count_include_pad", true).get<bool>();
  if (op == "max_pool2d")
    return max_pool2d_with_indices(x, size2(a.at("kernel_size")), stride2(), size2(get("padding", 0)),
                                   size2(get("dilation", 1)), ceil);
  if (op == "max_pool1d")
    return max_pool1d_with_indices(x, int1(a.at("kernel_size")), stride1(), int1(get("padding", 0)),
                                   int1(get("dilation", 1)), ceil);
  if (op == "avg_pool2d")
    return {avg_pool2d(x, size2(a.at("kernel_size")), stride2(), size2(get("padding", 0)), ceil, incl),
            {}};
  if (op == "avg_pool1d")
    return {avg_pool1d(x, int1(a.at("kernel_size")), stride1(), int1(get("padding", 0)), ceil, incl),
            {}};
  if (op == "adaptive_avg_pool2d") return {adaptive_avg_pool2d(x, size2(a.at("output_size"))), {}};
  return {adaptive_avg_pool1d(x, int1(a.at("output_size"))), {}};
}

TEST(PoolGolden, ForwardIndicesAndGradsMatchPyTorch) {
  size_t seen = 0;
  for (const json& c : golden("pool").at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE(name);
    ++seen;
    for (bool nc : {false, true}) {
      SCOPED_TRACE(nc ? "non-contiguous" : "contiguous");
      Tensor x = golden_tensor(c.at("inputs").at("x"));
      if (nc) x = noncontiguous(x);
      x.requires_grad_();
      auto [y, idx] = call_pool(c.at("op").get<std::string>(), c.at("args"), x);
      EXPECT_TRUE(all_close(y, golden_tensor(c.at("out")), 1e-5, 1e-6)) << "forward";
      if (c.contains("indices")) {
        EXPECT_TRUE(equal(idx, golden_tensor(c.at("indices")))) << "indices";
      }
      sum(y * golden_tensor(c.at("c"))).backward();
      EXPECT_TRUE(all_close(x.grad(), golden_tensor(c.at("grads").at("x")), 1e-5, 1e-6)) << "grad";
    }
  }
  EXPECT_EQ(seen, 13u);
}

TEST(PoolKernels, FastMatchesRef) {
  Generator gen(5);
  auto pick = [&](int64_t lo, int64_t hi) { return lo + randint(0, hi - lo + 1, {}, gen).item<int64_t>(); };
  for (int i = 0; i < 60; ++i) {
    for (DType t : {kF32, kF64, kBF16}) {
      const int64_t N = pick(1, 5), H = pick(1, 9), W = pick(1, i % 4 == 3 ? 60 : 17);  // wide rows: vector blocks
      Tensor x = to(randn({N, H, W}, gen), t);
      if (i % 3 == 0) x = to(randint(0, 3, {N, H, W}, gen), t);  // ties
      if (i % 5 == 0) x = masked_fill(x, lt(rand({N, H, W}, gen), 0.1), NAN);  // NaNs win, the last one
      if (i % 2) x = noncontiguous(x);
      // max: any kernel that leaves every window at least one element.
      backend::cpu::MaxPoolGeom g;
      g.N = N, g.H = H, g.W = W;
      g.kh = pick(1, std::min<int64_t>(H, 3)), g.kw = pick(1, std::min<int64_t>(W, 4));
      g.sh = pick(1, 3), g.sw = pick(1, 3), g.dh = pick(1, 2), g.dw = pick(1, 2);
      if ((g.kh - 1) * g.dh + 1 > H) g.dh = 1;
      if ((g.kw - 1) * g.dw + 1 > W) g.dw = 1;
      g.ph = pick(0, g.kh / 2), g.pw = pick(0, g.kw / 2);
      g.OH = (H + 2 * g.ph - g.dh * (g.kh - 1) - 1) / g.sh + 1;
      g.OW = (W + 2 * g.pw - g.dw * (g.kw - 1) - 1) / g.sw + 1;
      SCOPED_TRACE(fmt::format("case {} {}: N {} H {} W {} k {}x{} s {}x{} p {}x{} d {}x{}", i, name(t), N, H, W, g.kh,
                               g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw));
      Tensor a = empty({N, g.OH, g.OW}, {.dtype = t}), r = empty({N, g.OH, g.OW}, {.dtype = t});
      Tensor ai = empty({N, g.OH, g.OW}, {.dtype = kI64}), ri = empty({N, g.OH, g.OW}, {.dtype = kI64});
      backend::cpu::max_pool2d(g, x, a, ai);
      backend::cpu::ref::max_pool2d(g, x, r, ri);
      EXPECT_TRUE(equal(a, r)) << "max values";
      EXPECT_TRUE(equal(ai, ri)) << "max indices";
      // avg through the op (window tables) against the formula.
      const bool incl = i % 2 == 0;
      const int64_t kh = std::min<int64_t>(H, pick(1, 3)), kw = std::min<int64_t>(W, pick(1, 3));
      const int64_t sh = pick(1, 2), sw = pick(1, 3), ph = pick(0, kh / 2), pw = pick(0, kw / 2);
      Tensor y = squeeze(avg_pool2d(unsqueeze(x, 0), {kh, kw}, Size2{sh, sw}, {ph, pw}, false, incl), 0);
      Tensor yr = empty(y.shape(), {.dtype = t});
      backend::cpu::ref::avg_pool2d(x, yr, kh, kw, sh, sw, ph, pw, incl);
      const double tol = t == kBF16 ? 1e-2 : 1e-6;
      EXPECT_TRUE(all_close(y, yr, tol, tol)) << "avg";
      const int64_t oh = pick(1, 2 * H), ow = pick(1, 2 * W);
      Tensor z = squeeze(adaptive_avg_pool2d(unsqueeze(x, 0), {oh, ow}), 0);
      Tensor zr = empty({N, oh, ow}, {.dtype = t});
      backend::cpu::ref::adaptive_avg_pool2d(x, zr);
      EXPECT_TRUE(all_close(z, zr, tol, tol)) << "adaptive " << oh << "x" << ow;
    }
  }
}

TEST(Pool, TiesGoToFirstAndNaNWins) {
  Tensor x = tensor<float>({1, 3, 3, 2}, {1, 1, 2, 2});
  auto [v, i] = max_pool2d_with_indices(x, 2);
  EXPECT_EQ(v.item<float>(), 3.0f);
  EXPECT_EQ(i.item<int64_t>(), 1);
  Tensor xg = x.detach().requires_grad_();
  max_pool2d(xg, 2).backward(ones({1, 1, 1, 1}));
  EXPECT_TRUE(equal(xg.grad(), tensor<float>({0, 1, 0, 0}, {1, 1, 2, 2})));
  Tensor xn = tensor<float>({1, NAN, 5, 2}, {1, 2, 2});
  auto [vn, in] = max_pool2d_with_indices(xn, 2);
  EXPECT_TRUE(std::isnan(vn.item<float>()));
  EXPECT_EQ(in.item<int64_t>(), 1);
  // All -inf: the first element is the argmax.
  Tensor xi = full({1, 2, 2}, -INFINITY);
  EXPECT_EQ(max_pool2d_with_indices(xi, 2).second.item<int64_t>(), 0);
}

TEST(PoolGrad, FirstOrder) {
  uint64_t seed = 200;
  for (bool nc : {false, true}) {
    SCOPED_TRACE(nc ? "non-contiguous" : "contiguous");
    auto in = [&](const Shape& s) { Tensor x = leaf(s, ++seed); return nc ? noncontiguous(x) : x; };
    // Max pooling has kinks at ties; random f64 inputs have none.
    EXPECT_GRADCHECK([](const std::vector<Tensor>& v) { return max_pool2d(v[0], 2); }, {in({2, 2, 4, 5})});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& v) { return max_pool2d(v[0], 3, 2, 1, 2, true); },
                     {in({1, 2, 7, 6})});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& v) { return max_pool2d(v[0], {2, 3}, 1, {1, 1}); },
                     {in({2, 4, 5})});  // unbatched, overlapping windows
    EXPECT_GRADCHECK([](const std::vector<Tensor>& v) { return max_pool1d(v[0], 3, 2, 1, 1, true); },
                     {in({2, 3, 8})});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& v) { return avg_pool2d(v[0], 3, 2, 1, true, false); },
                     {in({1, 2, 5, 6})});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& v) { return avg_pool2d(v[0], {2, 3}, Size2{1, 2}, {1, 0}); },
                     {in({2, 2, 4, 5})});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& v) { return avg_pool1d(v[0], 3, 2, 1); }, {in({2, 7})});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& v) { return adaptive_avg_pool2d(v[0], {3, 4}); },
                     {in({1, 2, 7, 5})});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& v) { return adaptive_avg_pool1d(v[0], 5); }, {in({2, 3, 3})});
  }
}

TEST(PoolGrad, SecondOrder) {
  for (int op = 0; op < 3; ++op) {
    SCOPED_TRACE(op);
    TensorFn outer = [op](const std::vector<Tensor>& in) {
      TensorFn loss = [op](const std::vector<Tensor>& v) {
        Tensor y = op == 0 ? max_pool2d(v[0], 2, 1) : op == 1 ? avg_pool2d(v[0], 2, 1, 1) : adaptive_avg_pool2d(v[0], {2, 3});
        return sum(y * y * y);
      };
      Tensor g = kiln::grad(loss, {in[0]})[0];
      return sum(g * g);
    };
    EXPECT_GRADCHECK(outer, {leaf({1, 2, 3, 4}, 300 + uint64_t(op))});
  }
}

TEST(PoolErrors, Messages) {
  Tensor x = ones({2, 3, 5, 5});
  EXPECT_KILN_ERROR(max_pool2d(ones({5, 5}), 2), "[max_pool2d] input [5, 5] must be 4-D");
  EXPECT_KILN_ERROR(max_pool2d(x, 0), "[max_pool2d] kernel_size must be positive, got (0, 0)");
  EXPECT_KILN_ERROR(max_pool2d(x, 2, -1), "[max_pool2d] stride must be positive, got (-1, -1)");
  // stride = kernel is std::nullopt; 0 is no longer a stand-in for it.
  EXPECT_KILN_ERROR(max_pool2d(x, 2, 0), "[max_pool2d] stride must be positive, got (0, 0)");
  EXPECT_KILN_ERROR(avg_pool1d(ones({2, 3, 4}), 2, 0), "[avg_pool1d] stride must be positive, got 0");
  EXPECT_KILN_ERROR(max_pool2d(x, 2, 2, 0, 0), "[max_pool2d] dilation must be positive, got (0, 0)");
  EXPECT_KILN_ERROR(max_pool2d(x, 2, 2, 2), "[max_pool2d] padding (2, 2) must be non-negative and at most half the kernel_size (2, 2)");
  EXPECT_KILN_ERROR(max_pool2d(x, 6), "[max_pool2d] input [2, 3, 5, 5] is too small for kernel_size (6, 6)");
  EXPECT_KILN_ERROR(max_pool2d(ones({2, 3}, {.dtype = kI64}), 2), "[max_pool2d] input [2, 3] must be 4-D");
  EXPECT_KILN_ERROR(max_pool2d(ones({3, 4, 4}, {.dtype = kI64}), 2), "[max_pool2d] expects a floating input, got i64");
  EXPECT_KILN_ERROR(max_pool2d(ones({2, 3, 0, 4}), 1), "[max_pool2d] input [2, 3, 0, 4] has an empty spatial dim");
  EXPECT_KILN_ERROR(max_pool1d(ones({2, 3, 4}), 5), "[max_pool1d] input [2, 3, 4] is too small for kernel_size 5");
  EXPECT_KILN_ERROR(avg_pool2d(x, 3, 1, 2), "[avg_pool2d] padding (2, 2) must be non-negative and at most half");
  EXPECT_KILN_ERROR(avg_pool1d(ones({2, 3, 4}), 2, 1, -1), "[avg_pool1d] padding -1 must be non-negative");
  EXPECT_KILN_ERROR(adaptive_avg_pool2d(x, {0, 2}), "[adaptive_avg_pool2d] output_size must be positive, got (0, 2)");
  EXPECT_KILN_ERROR(adaptive_avg_pool1d(ones({2, 3, 4, 4}), 2), "[adaptive_avg_pool1d] input [2, 3, 4, 4] must be 3-D");
  EXPECT_KILN_ERROR(avg_pool2d(Tensor(), 2), "[avg_pool2d] input is an undefined tensor");
}

TEST(Pool, ShapesDefaultsAndBatching) {
  Generator gen(2);
  Tensor x = randn({2, 3, 7, 6}, gen);
  EXPECT_EQ(max_pool2d(x, 2).shape(), (Shape{2, 3, 3, 3}));
  EXPECT_TRUE(equal(max_pool2d(x, 2, std::nullopt), max_pool2d(x, 2, 2)));
  EXPECT_TRUE(equal(avg_pool2d(x, {3, 2}), avg_pool2d(x, {3, 2}, Size2{3, 2})));
  EXPECT_EQ(max_pool2d(x, 2, 2, 0, 1, true).shape(), (Shape{2, 3, 4, 3}));
  EXPECT_EQ(avg_pool2d(x, {3, 2}).shape(), (Shape{2, 3, 2, 3}));
  EXPECT_EQ(adaptive_avg_pool2d(x, {1, 1}).shape(), (Shape{2, 3, 1, 1}));
  EXPECT_TRUE(all_close(adaptive_avg_pool2d(x, {1, 1}), mean(x, {2, 3}, true)));
  EXPECT_TRUE(all_close(max_pool2d(x[0], 2), max_pool2d(x, 2)[0]));
  EXPECT_EQ(max_pool1d(randn({3, 10}, gen), 3).shape(), (Shape{3, 3}));
}

}  // namespace
}  // namespace kiln
