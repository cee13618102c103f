// Tests of interpolate: PyTorch goldens (values and input gradients, f32 and
// f64), the fast kernels against backend::cpu::ref on random shapes, modes and
// layouts, gradchecks in f64 (first and second order), thread-count
// invariance and error messages.
#include <cmath>

#include "src/backend/cpu/copy/resize.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using nlohmann::json;
using namespace testing;

using Mode = InterpolateMode;

InterpolateOptions options_from(const json& a) {
  InterpolateOptions o;
  const std::string mode = a.at("mode").get<std::string>();
  o.mode = mode == "nearest" ? Mode::Nearest : mode == "linear" ? Mode::Linear : Mode::Bilinear;
  o.align_corners = a.at("align_corners").get<bool>();
  if (a.contains("size")) o.size = a.at("size").get<std::vector<int64_t>>();
  if (a.contains("scale_factor")) o.scale_factor = a.at("scale_factor").get<std::vector<double>>();
  return o;
}

TEST(ResizeGolden, ForwardAndGradMatchPyTorch) {
  size_t seen = 0;
  for (const char* file : {"resize_nearest", "resize_linear"})
    for (const json& c : golden(file).at("cases")) {
      const std::string name = c.at("name").get<std::string>();
      SCOPED_TRACE(name);
      ++seen;
      const InterpolateOptions o = options_from(c.at("args"));
      for (bool nc : {false, true}) {
        SCOPED_TRACE(nc ? "non-contiguous" : "contiguous");
        Tensor x = golden_tensor(c.at("x"));
        const bool f64 = x.dtype() == kF64;
        const double rtol = f64 ? 1e-12 : 1e-5, atol = f64 ? 1e-12 : 1e-6;
        if (nc) x = noncontiguous(x);
        x.requires_grad_();
        Tensor y = interpolate(x, o);
        if (o.mode == Mode::Nearest)
          EXPECT_TRUE(equal(y, golden_tensor(c.at("out")))) << "forward (nearest copies exactly)";
        else
          EXPECT_TRUE(all_close(y, golden_tensor(c.at("out")), rtol, atol)) << "forward";
        sum(y * golden_tensor(c.at("c"))).backward();
        EXPECT_TRUE(all_close(x.grad(), golden_tensor(c.at("grad")), rtol, atol)) << "grad";
      }
    }
  EXPECT_EQ(seen, 37u);
}

// The op (which builds the tables) and the fast kernels against the ref loops,
// which evaluate PyTorch's formulas per element.
TEST(ResizeKernels, FastMatchesRef) {
  Generator gen(7);
  auto pick = [&](int64_t lo, int64_t hi) { return lo + randint(0, hi - lo + 1, {}, gen).item<int64_t>(); };
  const double scales[] = {0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 1.3333};
  for (int i = 0; i < 90; ++i) {
    const bool linear = i % 3 != 0, align = linear && i % 2 == 1, one_d = i % 5 == 4, by_scale = i % 4 < 2;
    for (DType t : {kF32, kF64, kBF16}) {
      const int64_t N = pick(1, 4), H = one_d ? 1 : pick(1, 9), W = pick(1, i % 7 == 6 ? 70 : 12);
      InterpolateOptions o;
      o.mode = !linear ? Mode::Nearest : one_d ? Mode::Linear : Mode::Bilinear;
      o.align_corners = align;
      double sh = 0, sw = 0;
      int64_t OH = H, OW;
      if (by_scale) {
        sh = one_d ? 0 : scales[pick(0, 7)], sw = scales[pick(0, 7)];
        if (!one_d) OH = int64_t(std::floor(double(H) * sh));
        OW = int64_t(std::floor(double(W) * sw));
        if (OH < 1 || OW < 1) continue;
        o.scale_factor = one_d ? std::vector<double>{sw} : std::vector<double>{sh, sw};
      } else {
        OH = one_d ? 1 : pick(1, 2 * H + 3), OW = pick(1, 2 * W + 3);
        o.size = one_d ? std::vector<int64_t>{OW} : std::vector<int64_t>{OH, OW};
      }
      SCOPED_TRACE(fmt::format("case {} {}: N {} H {} W {} -> {}x{} linear {} align {} scale {}x{}", i, name(t), N, H,
                               W, OH, OW, linear, align, sh, sw));
      Tensor x = to(randn({N, H, W}, gen), t);
      if (i % 2) x = noncontiguous(x);
      Tensor xin = (one_d ? reshape(x, {1, N, W}) : unsqueeze(x, 0)).detach().requires_grad_();
      Tensor y = reshape(interpolate(xin, o), {N, OH, OW});
      Tensor yr = empty({N, OH, OW}, {.dtype = t});
      backend::cpu::ref::interpolate(x, yr, linear, align, sh, sw);
      const double tol = t == kBF16 ? 1e-2 : t == kF32 ? 1e-5 : 1e-12;
      if (linear)
        EXPECT_TRUE(all_close(y, yr, tol, tol)) << "forward";
      else
        EXPECT_TRUE(equal(y, yr)) << "forward";
      Tensor gy = to(randn({N, OH, OW}, gen), t);
      y.backward(gy);
      Tensor gr = empty({N, H, W}, {.dtype = t});
      backend::cpu::ref::interpolate_backward(gy, gr, linear, align, sh, sw);
      EXPECT_TRUE(all_close(reshape(xin.grad(), {N, H, W}), gr, tol, tol)) << "backward";
    }
  }
}

TEST(ResizeGrad, FirstOrder) {
  uint64_t seed = 400;
  for (bool nc : {false, true}) {
    SCOPED_TRACE(nc ? "non-contiguous" : "contiguous");
    auto in = [&](const Shape& s) { Tensor x = leaf(s, ++seed); return nc ? noncontiguous(x) : x; };
    auto check = [&](InterpolateOptions o, const Shape& s) {
      EXPECT_GRADCHECK([o](const std::vector<Tensor>& v) { return interpolate(v[0], o); }, {in(s)});
    };
    check({.scale_factor = {2}}, {2, 2, 3, 4});
    check({.size = {5, 2}}, {1, 2, 3, 4});
    check({.scale_factor = {1.5}}, {1, 2, 5});
    check({.scale_factor = {2}, .mode = Mode::Bilinear}, {2, 2, 3, 4});
    check({.scale_factor = {1.5, 0.7}, .mode = Mode::Bilinear, .align_corners = true}, {1, 2, 4, 5});
    check({.size = {2, 7}, .mode = Mode::Bilinear}, {1, 1, 5, 3});
    check({.size = {7}, .mode = Mode::Linear, .align_corners = true}, {2, 2, 4});
    check({.scale_factor = {3}, .mode = Mode::Linear}, {1, 3, 3});
  }
}

TEST(ResizeGrad, SecondOrder) {
  for (Mode m : {Mode::Nearest, Mode::Bilinear}) {
    TensorFn outer = [m](const std::vector<Tensor>& in) {
      TensorFn loss = [m](const std::vector<Tensor>& v) {
        Tensor y = interpolate(v[0], {.size = {3, 5}, .mode = m});
        return sum(y * y * y);
      };
      Tensor g = kiln::grad(loss, {in[0]})[0];
      return sum(g * g);
    };
    EXPECT_GRADCHECK(outer, {leaf({1, 2, 2, 3}, 450 + uint64_t(m))});
  }
}

TEST(Resize, ShapesScalarsAndIdentity) {
  Generator gen(3);
  Tensor x = randn({2, 3, 5, 7}, gen);
  EXPECT_EQ(interpolate(x, {.scale_factor = {2}}).shape(), (Shape{2, 3, 10, 14}));
  EXPECT_EQ(interpolate(x, {.scale_factor = {1.5, 0.5}}).shape(), (Shape{2, 3, 7, 3}));  // floor(in * scale)
  EXPECT_EQ(interpolate(x, {.size = {4}, .mode = Mode::Bilinear}).shape(), (Shape{2, 3, 4, 4}));
  EXPECT_EQ(interpolate(randn({2, 3, 5}, gen), {.size = {9}, .mode = Mode::Linear}).shape(), (Shape{2, 3, 9}));
  // Same size: a copy for every mode.
  for (Mode m : {Mode::Nearest, Mode::Bilinear})
    EXPECT_TRUE(equal(interpolate(x, {.size = {5, 7}, .mode = m}), x));
  // Nearest x2 repeats each element in a 2x2 block.
  Tensor y = interpolate(x, {.scale_factor = {2}});
  EXPECT_TRUE(equal(slice(slice(y, 2, 1, 10, 2), 3, 0, 14, 2), x));
  // Its gradient sums each block.
  Tensor xg = x.detach().requires_grad_();
  interpolate(xg, {.scale_factor = {2}}).backward(ones({2, 3, 10, 14}));
  EXPECT_TRUE(equal(xg.grad(), full({2, 3, 5, 7}, 4.0)));
  // Bilinear with align_corners keeps the corners.
  Tensor z = interpolate(x, {.size = {9, 4}, .mode = Mode::Bilinear, .align_corners = true});
  EXPECT_TRUE(all_close(select(select(z, 2, 8), 2, 3), select(select(x, 2, 4), 2, 6)));
}

// The backward's tables pad short tap lists with weight 0; an inf gradient
// must reach only the inputs that feed that output, never NaN elsewhere. Taps
// whose weight is exactly 0 (output (0, 0) of bilinear reads input 1 with
// weight 0) add nothing too, where PyTorch adds 0 * inf = NaN.
TEST(Resize, NonFiniteGradientStaysLocal) {
  for (Mode m : {Mode::Nearest, Mode::Bilinear}) {
    SCOPED_TRACE(int(m));
    Tensor x = zeros({1, 1, 3, 5}).requires_grad_();
    Tensor gy = zeros({1, 1, 7, 11});
    gy.data<float>()[0] = INFINITY;  // output (0, 0) reads input (0, 0) only, in both modes
    interpolate(x, {.size = {7, 11}, .mode = m}).backward(gy);
    const std::vector<float> g = x.grad().to_vector<float>();
    EXPECT_TRUE(std::isinf(g[0]));
    for (size_t i = 1; i < g.size(); ++i) EXPECT_EQ(g[i], 0.0f) << "input " << i;
  }
}

TEST(Resize, SameForAnyThreadCount) {
  Generator gen(4);
  Tensor x = randn({4, 16, 9, 11}, gen), gy = randn({4, 16, 13, 20}, gen);
  const int before = get_num_threads();
  std::vector<Tensor> outs, grads;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    Tensor xg = x.detach().requires_grad_();
    Tensor y = interpolate(xg, {.size = {13, 20}, .mode = Mode::Bilinear});
    y.backward(gy);
    outs.push_back(y), grads.push_back(xg.grad());
  }
  set_num_threads(before);
  EXPECT_TRUE(equal(outs[0], outs[1]));
  EXPECT_TRUE(equal(grads[0], grads[1]));
}

TEST(ResizeErrors, Messages) {
  Tensor x = ones({2, 3, 4, 4});
  EXPECT_KILN_ERROR(interpolate(Tensor(), {.size = {2}}), "[interpolate] input is an undefined tensor");
  EXPECT_KILN_ERROR(interpolate(ones({3, 4}), {.size = {2}}),
                    "[interpolate] input [3, 4] must be 3-D [N, C, L] or 4-D [N, C, H, W], got 2-D");
  EXPECT_KILN_ERROR(interpolate(ones({1, 2, 3, 4, 5}), {.size = {2}}), "must be 3-D [N, C, L] or 4-D [N, C, H, W], got 5-D");
  EXPECT_KILN_ERROR(interpolate(ones({2, 3, 4}, {.dtype = kI64}), {.size = {2}}),
                    "[interpolate] expects a floating input, got i64 [2, 3, 4]");
  EXPECT_KILN_ERROR(interpolate(x, {.size = {2}, .mode = Mode::Linear}),
                    "[interpolate] mode linear needs a 3-D input [N, C, L], got 4-D [2, 3, 4, 4]");
  EXPECT_KILN_ERROR(interpolate(ones({2, 3, 4}), {.size = {2}, .mode = Mode::Bilinear}),
                    "[interpolate] mode bilinear needs a 4-D input [N, C, H, W], got 3-D [2, 3, 4]");
  EXPECT_KILN_ERROR(interpolate(x, {.size = {2}, .align_corners = true}),
                    "[interpolate] align_corners can only be set with the interpolating modes linear and bilinear, not nearest");
  EXPECT_KILN_ERROR(interpolate(x, {.size = {2}, .scale_factor = {2}}),
                    "[interpolate] only one of size and scale_factor may be given, got size [2] and scale_factor [2]");
  EXPECT_KILN_ERROR(interpolate(x, {}), "[interpolate] either size or scale_factor must be given");
  EXPECT_KILN_ERROR(interpolate(x, {.size = {2, 3, 4}}),
                    "[interpolate] size [2, 3, 4] must have 1 or 2 entries (one per spatial dim of input [2, 3, 4, 4])");
  EXPECT_KILN_ERROR(interpolate(ones({2, 3, 4}), {.scale_factor = {2, 2}}),
                    "[interpolate] scale_factor [2, 2] must have 1 or 1 entries");
  EXPECT_KILN_ERROR(interpolate(x, {.size = {3, 0}}), "[interpolate] size must be positive, got [3, 0]");
  EXPECT_KILN_ERROR(interpolate(x, {.size = {-1}}), "[interpolate] size must be positive, got [-1]");
  EXPECT_KILN_ERROR(interpolate(x, {.scale_factor = {2, -1}}),
                    "[interpolate] scale_factor must be positive and finite, got [2, -1]");
  EXPECT_KILN_ERROR(interpolate(x, {.scale_factor = {INFINITY}}), "scale_factor must be positive and finite");
  EXPECT_KILN_ERROR(interpolate(x, {.scale_factor = {0.2}}),
                    "[interpolate] input [2, 3, 4, 4] with scale_factor [0.2] gives an empty output");
  EXPECT_KILN_ERROR(interpolate(ones({2, 3, 0, 4}), {.size = {2}}), "[interpolate] input [2, 3, 0, 4] has an empty spatial dim");
}

}  // namespace
}  // namespace kiln
