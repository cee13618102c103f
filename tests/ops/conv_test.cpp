// Tests of conv1d/conv2d/conv_transpose1d/conv_transpose2d: PyTorch goldens
// (values and gradients), the oneDNN kernels against backend::cpu::ref on random
// geometries, the primitive and weight-reorder caches, gradchecks in f64
// (first and second order) and error messages.
#include <functional>

#include "kiln/ops/conv_algorithm.h"
#include "src/backend/cpu/linalg/conv.h"
#include "tests/ops/window_args.h"
#include "tests/support/ops_devices.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using nlohmann::json;
using namespace testing;


// Calls the kiln op a golden case names, with its arguments (PyTorch's defaults where absent).
Tensor call_conv(const std::string& op, const json& a, const Tensor& x, const Tensor& w, const Tensor& b) {
  auto get = [&](const char* k, json d) { return a.contains(k) ? a.at(k) : d; };
  const int64_t groups = get("groups", 1).get<int64_t>();
  if (op == "conv2d" || op == "conv1d") {
    json p = get("padding", 0);
    ConvPadding pad = p.is_string() ? ConvPadding(p.get<std::string>())
                      : p.is_array() ? ConvPadding(p[0].get<int64_t>(), p[1].get<int64_t>())
                                     : ConvPadding(p.get<int64_t>());
    if (op == "conv2d") return conv2d(x, w, b, size2(get("stride", 1)), pad, size2(get("dilation", 1)), groups);
    return conv1d(x, w, b, int1(get("stride", 1)), pad, int1(get("dilation", 1)), groups);
  }
  if (op == "conv_transpose2d")
    return conv_transpose2d(x, w, b, size2(get("stride", 1)), size2(get("padding", 0)),
                            size2(get("output_padding", 0)), groups, size2(get("dilation", 1)));
  return conv_transpose1d(x, w, b, int1(get("stride", 1)), int1(get("padding", 0)), int1(get("output_padding", 0)),
                          groups, int1(get("dilation", 1)));
}

void check_goldens(const std::string& file, size_t expected_cases) {
  for_each_device([&](Device d) {
  size_t seen = 0;
  for (const json& c : golden(file).at("cases")) {
    const std::string name = c.at("name").get<std::string>(), op = c.at("op").get<std::string>();
    SCOPED_TRACE(name);
    ++seen;
    const json& in = c.at("inputs");
    for (bool nc : {false, true}) {
      SCOPED_TRACE(nc ? "non-contiguous" : "contiguous");
      Tensor x = golden_tensor(in.at("x")), w = golden_tensor(in.at("w"));
      Tensor b = in.contains("b") ? golden_tensor(in.at("b")) : Tensor();
      if (nc) x = noncontiguous(x), w = noncontiguous(w);
      x = to(x, d), w = to(w, d), b = b.defined() ? to(b, d) : b;
      x.requires_grad_(), w.requires_grad_();
      if (b.defined()) b.requires_grad_();
      Tensor y = call_conv(op, c.at("args"), x, w, b);
      EXPECT_EQ(y.device(), d);
      EXPECT_TRUE(all_close(to(y, kCPU), golden_tensor(c.at("out")), 1e-4, 1e-5)) << "forward";
      sum(y * to(golden_tensor(c.at("c")), d)).backward();
      const json& g = c.at("grads");
      EXPECT_TRUE(all_close(to(x.grad(), kCPU), golden_tensor(g.at("x")), 1e-4, 1e-5)) << "grad x";
      EXPECT_TRUE(all_close(to(w.grad(), kCPU), golden_tensor(g.at("w")), 1e-4, 1e-5)) << "grad w";
      if (b.defined()) {
        EXPECT_TRUE(all_close(to(b.grad(), kCPU), golden_tensor(g.at("b")), 1e-4, 1e-5)) << "grad b";
      }
    }
  }
  EXPECT_EQ(seen, expected_cases);
  });
}

TEST(ConvGolden, ForwardAndGradsMatchPyTorch) { check_goldens("conv", 10); }
TEST(ConvGolden, TransposeForwardAndGradsMatchPyTorch) { check_goldens("conv_transpose", 5); }

// ---- oneDNN kernels against the plain loops ----

backend::cpu::ConvGeom random_geom(Generator& gen, uint64_t i) {
  auto pick = [&](int64_t lo, int64_t hi) { return lo + int64_t(randint(0, hi - lo + 1, {}, gen).item<int64_t>()); };
  backend::cpu::ConvGeom g;
  g.groups = (i % 3 == 0) ? pick(2, 3) : 1;
  g.B = pick(1, 3);
  g.C = g.groups * pick(1, 4);
  g.O = g.groups * pick(1, 5);
  g.KH = pick(1, 3), g.KW = pick(1, 4);
  g.sh = pick(1, 2), g.sw = pick(1, 3);
  g.dh = pick(1, 2), g.dw = pick(1, 2);
  g.pt = pick(0, 2), g.pl = pick(0, 1);
  g.H = pick(g.dh * (g.KH - 1) + 1, 9), g.W = pick(g.dw * (g.KW - 1) + 1, 10);
  int64_t pb = i % 2 ? g.pt : pick(0, 2), pr = i % 2 ? g.pl : pick(0, 2);  // symmetric and not
  const int64_t sh = g.H + g.pt + pb - g.dh * (g.KH - 1) - 1, sw = g.W + g.pl + pr - g.dw * (g.KW - 1) - 1;
  g.OH = sh / g.sh + 1, g.OW = sw / g.sw + 1;
  g.pb = pb - sh % g.sh, g.pr = pr - sw % g.sw;
  return g;
}

TEST(ConvKernels, OneDnnMatchesRef) {
  Generator gen(7);
  int dnnl_runs = 0;
  for (uint64_t i = 0; i < 48; ++i) {
    backend::cpu::ConvGeom g = random_geom(gen, i);
    if (i >= 40) {  // 16+ channels per group: oneDNN's blocked layouts and the reorders around them
      g.C *= 16, g.O *= 16;
      if (i % 2) g.B = 1, g.H = std::max<int64_t>(g.H, 5), g.W = std::max<int64_t>(g.W, 5), g.pt = g.pl = g.pb = g.pr = 1,
                 g.sh = g.sw = g.dh = g.dw = 1, g.KH = g.KW = 3, g.OH = g.H, g.OW = g.W;
    }
    SCOPED_TRACE(fmt::format("case {}: B {} C {} O {} g {} H {} W {} K {}x{} s {}x{} d {}x{} pad {} {} {} {}", i, g.B,
                             g.C, g.O, g.groups, g.H, g.W, g.KH, g.KW, g.sh, g.sw, g.dh, g.dw, g.pt, g.pl, g.pb, g.pr));
    Tensor large = randn({g.B, g.C, g.H, g.W}, gen), small = randn({g.B, g.O, g.OH, g.OW}, gen);
    Tensor w = randn({g.O, g.C / g.groups, g.KH, g.KW}, gen), bo = randn({g.O}, gen), bc = randn({g.C}, gen);
    if (i % 4 == 1) large = noncontiguous(large), w = noncontiguous(w);
    Tensor a = empty({g.B, g.O, g.OH, g.OW}), r = empty({g.B, g.O, g.OH, g.OW});
    backend::cpu::conv_forward(g, large, w, i % 2 ? &bo : nullptr, a);
    dnnl_runs += backend::cpu::last_conv_impl() != "ref";
    backend::cpu::ref::conv_forward(g, large, w, i % 2 ? &bo : nullptr, r);
    EXPECT_TRUE(all_close(a, r, 1e-4, 1e-4)) << "forward";
    Tensor ad = empty({g.B, g.C, g.H, g.W}), rd = empty({g.B, g.C, g.H, g.W});
    backend::cpu::conv_backward_data(g, small, w, i % 2 ? &bc : nullptr, ad);
    backend::cpu::ref::conv_backward_data(g, small, w, i % 2 ? &bc : nullptr, rd);
    EXPECT_TRUE(all_close(ad, rd, 1e-4, 1e-4)) << "backward data";
    Tensor aw = empty(w.shape()), rw = empty(w.shape()), ab = empty({g.O}), rb = empty({g.O});
    backend::cpu::conv_backward_weights(g, large, small, aw, &ab);
    backend::cpu::ref::conv_backward_weights(g, large, small, rw, &rb);
    EXPECT_TRUE(all_close(aw, rw, 1e-4, 1e-4)) << "backward weights";
    EXPECT_TRUE(all_close(ab, rb, 1e-4, 1e-4)) << "backward bias";
  }
  EXPECT_GT(dnnl_runs, 40) << "f32 should run on oneDNN";
}

// NOTE [Winograd] in src/backend/cpu/linalg/conv.cpp: a 3x3 stride-1 f32
// conv with channels in multiples of 16 runs oneDNN's Winograd kernels on
// AVX-512 (direct elsewhere), within f32 rounding of the f64 reference in all
// three passes; set_conv_winograd(false) gives the direct kernels back.
TEST(ConvKernels, WinogradWhereOfferedMatchesReference) {
  Generator gen(11);
  backend::cpu::ConvGeom g{.B = 8, .C = 32, .O = 48, .H = 9, .W = 11, .OH = 9, .OW = 11, .KH = 3, .KW = 3,
                           .pt = 1, .pl = 1, .pb = 1, .pr = 1};
  Tensor large = randn({g.B, g.C, g.H, g.W}, gen), small = randn({g.B, g.O, g.OH, g.OW}, gen);
  Tensor w = mul(randn({g.O, g.C, 3, 3}, gen), 0.1), bo = randn({g.O}, gen);
  Tensor r = empty(small.shape()), rd = empty(large.shape()), rw = empty(w.shape()), rb = empty({g.O});
  backend::cpu::ref::conv_forward(g, large, w, &bo, r);
  backend::cpu::ref::conv_backward_data(g, small, w, nullptr, rd);
  backend::cpu::ref::conv_backward_weights(g, large, small, rw, &rb);
  ASSERT_TRUE(conv_winograd()) << "on by default";
  for (bool wino : {true, false}) {
    SCOPED_TRACE(wino ? "winograd" : "direct");
    set_conv_winograd(wino);
    EXPECT_EQ(backend::cpu::conv_winograd(), wino);
    Tensor a = empty(small.shape()), ad = empty(large.shape()), aw = empty(w.shape()), ab = empty({g.O});
    backend::cpu::conv_forward(g, large, w, &bo, a);
    const std::string impl = backend::cpu::last_conv_impl();
    const bool ran_wino = impl.rfind("jit_wino", 0) == 0;
    // ONEDNN_MAX_CPU_ISA=AVX2 hides oneDNN's AVX-512 kernels: direct then, as on an AVX2 CPU.
    const bool offered = cpu_info().avx512 && std::getenv("ONEDNN_MAX_CPU_ISA") == nullptr;
    if (!wino || offered) EXPECT_EQ(ran_wino, wino) << impl;
    EXPECT_EQ(impl.find("ref"), std::string::npos) << impl;
    backend::cpu::conv_backward_data(g, small, w, nullptr, ad);
    EXPECT_EQ(backend::cpu::last_conv_impl().rfind("jit_wino", 0) == 0, ran_wino) << backend::cpu::last_conv_impl();
    backend::cpu::conv_backward_weights(g, large, small, aw, &ab);
    EXPECT_EQ(backend::cpu::last_conv_impl().rfind("jit_wino", 0) == 0, ran_wino) << backend::cpu::last_conv_impl();
    EXPECT_TRUE(all_close(a, r, 1e-5, 2e-5)) << "forward";
    EXPECT_TRUE(all_close(ad, rd, 1e-5, 2e-5)) << "backward data";
    EXPECT_TRUE(all_close(aw, rw, 1e-5, 1e-4)) << "backward weights";
    EXPECT_TRUE(all_close(ab, rb, 1e-5, 1e-4)) << "backward bias";
  }
  set_conv_winograd(true);
}

TEST(ConvKernels, F32RunsOnOneDnnAndBf16IsClose) {
  Generator gen(3);
  Tensor x = randn({4, 8, 12, 12}, gen), w = randn({16, 8, 3, 3}, gen), b = randn({16}, gen);
  Tensor y = conv2d(x, w, b, 1, 1);
  EXPECT_NE(backend::cpu::last_conv_impl(), "ref");
  EXPECT_EQ(backend::cpu::last_conv_impl().find("ref"), std::string::npos) << backend::cpu::last_conv_impl();
  Tensor yb = conv2d(to(x, kBF16), to(w, kBF16), to(b, kBF16), 1, 1);
  EXPECT_EQ(yb.dtype(), kBF16);
  EXPECT_TRUE(all_close(to(yb, kF32), y, 3e-2, 0.15));
  Tensor y64 = conv2d(to(x, kF64), to(w, kF64), to(b, kF64), 1, 1);
  EXPECT_TRUE(all_close(to(y64, kF32), y, 1e-4, 1e-4));
  // bf16 gradients (backward-data, backward-weights, bias) against f32's.
  Tensor g = randn(y.shape(), gen);
  auto grads = [&](DType t) {
    // Fresh leaves (to() returns the tensor itself when the dtype matches).
    Tensor xs = to(x, t).detach().requires_grad_(), ws = to(w, t).detach().requires_grad_();
    Tensor bs = to(b, t).detach().requires_grad_();
    conv2d(xs, ws, bs, 1, 1).backward(to(g, t));
    return std::vector<Tensor>{to(xs.grad(), kF32), to(ws.grad(), kF32), to(bs.grad(), kF32)};
  };
  std::vector<Tensor> gf = grads(kF32), gb = grads(kBF16);
  for (size_t i = 0; i < 3; ++i) {
    const double scale = max(abs(gf[i])).item<float>();
    EXPECT_TRUE(all_close(gb[i], gf[i], 0.0, 2e-2 * scale)) << "grad " << i;
  }
}

TEST(ConvKernels, PrimitivesAndReorderedWeightsAreCached) {
  Generator gen(4);
  Tensor x = randn({2, 16, 10, 10}, gen), w = randn({32, 16, 3, 3}, gen);
  conv2d(x, w, {}, 1, 1);
  const auto s0 = backend::cpu::conv_cache_stats();
  conv2d(x, w, {}, 1, 1);
  const auto s1 = backend::cpu::conv_cache_stats();
  EXPECT_EQ(s1.hits, s0.hits + 1);
  EXPECT_EQ(s1.misses, s0.misses);
  EXPECT_EQ(s1.weight_reorders, s0.weight_reorders) << "an unchanged weight is not reordered again";
  EXPECT_GT(s1.reorders_skipped, s0.reorders_skipped) << "x and w were found already reordered";
  {
    NoGradGuard ng;
    mul_(w, 2.0);  // bumps the version: the held reorder is stale
  }
  Tensor y = conv2d(x, w, {}, 1, 1);
  const auto s2 = backend::cpu::conv_cache_stats();
  EXPECT_GT(s0.weight_reorders, 0) << "16+ channels use blocked weights";
  EXPECT_EQ(s2.weight_reorders, s1.weight_reorders + 1);
  Tensor r = empty(y.shape());
  backend::cpu::ConvGeom g{2, 16, 32, 1, 10, 10, 10, 10, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
  backend::cpu::ref::conv_forward(g, x, w, nullptr, r);
  EXPECT_TRUE(all_close(y, r, 1e-4, 1e-4)) << "the updated weight is used";
}

TEST(ConvKernels, InPlaceWritesInvalidateReorderedInputs) {
  // 16+ channels: blocked layouts, so x is reordered and cached (NOTE [Reordered inputs]).
  Generator gen(5);
  Tensor x = randn({2, 16, 6, 6}, gen), w = randn({16, 16, 3, 3}, gen);
  Tensor y0 = conv2d(x, w, {}, 1, 1);
  {
    NoGradGuard ng;
    add_(x, 1.0);
  }
  Tensor y1 = conv2d(x, w, {}, 1, 1);
  Tensor r = empty(y1.shape());
  backend::cpu::ConvGeom g{2, 16, 16, 1, 6, 6, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
  backend::cpu::ref::conv_forward(g, x, w, nullptr, r);
  EXPECT_TRUE(all_close(y1, r, 1e-4, 1e-4)) << "the updated input is used";
  EXPECT_FALSE(all_close(y0, y1, 1e-4, 1e-4));
  // A new tensor that reuses freed memory is not mistaken for the old one.
  for (int i = 0; i < 3; ++i) {
    Tensor xi = randn({2, 16, 6, 6}, gen);
    Tensor yi = conv2d(xi, w, {}, 1, 1);
    backend::cpu::ref::conv_forward(g, xi, w, nullptr, r);
    EXPECT_TRUE(all_close(yi, r, 1e-4, 1e-4)) << "fresh input " << i;
  }
}

// ---- gradients ----

TEST(ConvGrad, Conv2dFirstOrder) {
  struct Case {
    Shape x, w;
    bool bias;
    Size2 stride;
    ConvPadding pad;
    Size2 dil;
    int64_t groups;
  };
  const std::vector<Case> cases = {
      {{2, 3, 5, 4}, {2, 3, 3, 2}, true, 1, 1, 1, 1},
      {{1, 4, 6, 5}, {4, 2, 2, 3}, false, {2, 1}, {0, 1}, {1, 2}, 2},
      {{1, 2, 5, 5}, {3, 2, 4, 3}, true, 1, "same", 1, 1},
      {{2, 2, 7, 6}, {2, 1, 3, 3}, true, 3, 1, 1, 2},
      {{3, 4, 4}, {2, 3, 2, 2}, true, 1, "valid", 1, 1},  // unbatched
  };
  uint64_t seed = 100;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    for (bool nc : {false, true}) {
      SCOPED_TRACE(fmt::format("case {}{}", i, nc ? " non-contiguous" : ""));
      Tensor x = leaf(c.x, ++seed), w = leaf(c.w, ++seed), b = leaf({c.w[0]}, ++seed);
      if (nc) x = noncontiguous(x);
      EXPECT_GRADCHECK(
          [&](const std::vector<Tensor>& in) {
            return conv2d(in[0], in[1], c.bias ? in[2] : Tensor(), c.stride, c.pad, c.dil, c.groups);
          },
          {x, w, b});
    }
  }
}

TEST(ConvGrad, Conv1dAndTransposedFirstOrder) {
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return conv1d(in[0], in[1], in[2], 2, 1, 2); },
                   {leaf({2, 3, 9}, 1), leaf({2, 3, 3}, 2), leaf({2}, 3)});
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return conv1d(in[0], in[1], {}, 1, "same", 1, 2); },
                   {noncontiguous(leaf({2, 4, 6}, 4)), leaf({2, 2, 4}, 5)});
  EXPECT_GRADCHECK(
      [](const std::vector<Tensor>& in) { return conv_transpose2d(in[0], in[1], in[2], 2, 1, 1); },
      {leaf({2, 3, 3, 4}, 6), leaf({3, 2, 3, 3}, 7), leaf({2}, 8)});
  EXPECT_GRADCHECK(
      [](const std::vector<Tensor>& in) {
        return conv_transpose2d(in[0], in[1], in[2], {1, 2}, {0, 1}, {0, 1}, 2, {2, 1});
      },
      {noncontiguous(leaf({1, 4, 3, 3}, 9)), leaf({4, 3, 2, 3}, 10), leaf({6}, 11)});
  EXPECT_GRADCHECK(
      [](const std::vector<Tensor>& in) { return conv_transpose1d(in[0], in[1], in[2], 3, 1, 2); },
      {leaf({2, 3, 4}, 12), leaf({3, 2, 3}, 13), leaf({2}, 14)});
  // output_padding >= stride, allowed because it is < dilation.
  EXPECT_GRADCHECK(
      [](const std::vector<Tensor>& in) { return conv_transpose2d(in[0], in[1], {}, 1, 0, 1, 1, 2); },
      {leaf({1, 2, 3, 3}, 15), leaf({2, 2, 2, 2}, 16)});
}

TEST(ConvGrad, SecondOrder) {
  // d/d(x, w) of sum(grad_x(loss)^2) + sum(grad_w^2): exercises every primitive's vjp.
  TensorFn outer = [](const std::vector<Tensor>& in) {
    TensorFn loss = [](const std::vector<Tensor>& v) {
      Tensor y = conv2d(v[0], v[1], v[2], 2, 1, 1, 1);
      return sum(y * y * y);
    };
    std::vector<Tensor> g = kiln::grad(loss, {in[0], in[1], in[2]});
    return sum(g[0] * g[0]) + sum(g[1] * g[1]) + sum(g[2] * g[2]);
  };
  EXPECT_GRADCHECK(outer, {leaf({1, 2, 4, 3}, 21), leaf({2, 2, 2, 2}, 22), leaf({2}, 23)});
  TensorFn outer_t = [](const std::vector<Tensor>& in) {
    TensorFn loss = [](const std::vector<Tensor>& v) {
      Tensor y = conv_transpose2d(v[0], v[1], v[2], 2, 0, 1);
      return sum(y * y * y);
    };
    std::vector<Tensor> g = kiln::grad(loss, {in[0], in[1], in[2]});
    return sum(g[0] * g[0]) + sum(g[1] * g[1]) + sum(g[2] * g[2]);
  };
  EXPECT_GRADCHECK(outer_t, {leaf({1, 2, 2, 3}, 24), leaf({2, 1, 2, 2}, 25), leaf({1}, 26)});
}

// ---- errors ----

TEST(ConvErrors, Messages) {
  Tensor x = ones({2, 4, 5, 5}), w = ones({6, 2, 3, 3});
  EXPECT_KILN_ERROR(conv2d(ones({4, 5}), w), "[conv2d] input [4, 5] must be 4-D");
  EXPECT_KILN_ERROR(conv2d(x, ones({6, 4, 3})), "[conv2d] weight [6, 4, 3] must be 4-D");
  EXPECT_KILN_ERROR(conv2d(x, w), "[conv2d] input [2, 4, 5, 5] has 4 channels but weight [6, 2, 3, 3] expects 2");
  EXPECT_KILN_ERROR(conv2d(x, w, {}, 1, 0, 1, 3), "[conv2d] input channels 4 (input [2, 4, 5, 5]) are not divisible by groups 3");
  EXPECT_KILN_ERROR(conv2d(ones({2, 4, 5, 5}), ones({5, 2, 3, 3}), {}, 1, 0, 1, 2),
                    "[conv2d] output channels 5 (weight [5, 2, 3, 3]) are not divisible by groups 2");
  EXPECT_KILN_ERROR(conv2d(x, w, {}, 1, 0, 1, 0), "[conv2d] groups must be positive, got 0");
  EXPECT_KILN_ERROR(conv2d(x, w, {}, {1, 0}, 0, 1, 2), "[conv2d] stride must be positive, got (1, 0)");
  EXPECT_KILN_ERROR(conv2d(x, w, {}, 1, 0, -1, 2), "[conv2d] dilation must be positive, got (-1, -1)");
  EXPECT_KILN_ERROR(conv2d(x, w, {}, 1, {0, -1}, 1, 2), "[conv2d] padding must be non-negative, got (0, -1)");
  EXPECT_KILN_ERROR(conv2d(x, w, {}, 1, "full", 1, 2), "[conv2d] padding must be an int, a pair, 'same'/'SAME' or 'valid'/'VALID', got 'full'");
  EXPECT_KILN_ERROR(conv2d(x, ones({6, 2, 7, 3}), {}, 1, 0, 1, 2), "[conv2d] output size would be empty");
  EXPECT_KILN_ERROR(conv2d(x, w, ones({5}), 1, 0, 1, 2),
                    "[conv2d] bias [5] does not match weight [6, 2, 3, 3] (expected [6]");
  EXPECT_KILN_ERROR(conv2d(x, ones({6, 2, 3, 3}, {.dtype = kF64}), {}, 1, 0, 1, 2),
                    "[conv2d] dtype mismatch: input [2, 4, 5, 5] is f32 and weight [6, 2, 3, 3] is f64");
  EXPECT_KILN_ERROR(conv2d(x, w, ones({6}, {.dtype = kF64}), 1, 0, 1, 2), "[conv2d] dtype mismatch: bias [6] is f64");
  EXPECT_KILN_ERROR(conv2d(ones({2, 4, 5, 5}, {.dtype = kI64}), ones({6, 2, 3, 3}, {.dtype = kI64}), {}, 1, 0, 1, 2),
                    "[conv2d] expects a floating input, got i64");
  EXPECT_KILN_ERROR(conv2d(Tensor(), w), "[conv2d] input is an undefined tensor");
  EXPECT_KILN_ERROR(conv1d(ones({2, 3, 5, 5}), ones({2, 3, 3})), "[conv1d] input [2, 3, 5, 5] must be 3-D");
  EXPECT_KILN_ERROR(conv1d(ones({2, 3, 5}), ones({2, 3, 3}), {}, 1, {1, 2}), "[conv1d] padding must be one int");
  EXPECT_KILN_ERROR(conv1d(ones({2, 3, 5}), ones({2, 3, 3}), {}, 0), "[conv1d] stride must be positive, got 0");
  EXPECT_KILN_ERROR(conv1d(ones({2, 3, 2}), ones({2, 3, 3})), "[conv1d] output size would be empty");
  Tensor xt = ones({1, 4, 3, 3}), wt = ones({4, 3, 2, 2});
  EXPECT_KILN_ERROR(conv_transpose2d(xt, ones({2, 3, 2, 2})),
                    "[conv_transpose2d] input [1, 4, 3, 3] has 4 channels but weight [2, 3, 2, 2] expects 2");
  EXPECT_KILN_ERROR(conv_transpose2d(xt, wt, {}, 2, 0, 2), "[conv_transpose2d] output_padding (2, 2) must be smaller than stride (2, 2) or dilation (1, 1)");
  EXPECT_KILN_ERROR(conv_transpose2d(xt, wt, {}, 1, -1), "[conv_transpose2d] padding must be non-negative");
  EXPECT_KILN_ERROR(conv_transpose2d(xt, wt, {}, 1, 0, 0, 3), "[conv_transpose2d] input channels 4 (input [1, 4, 3, 3]) are not divisible by groups 3");
  EXPECT_KILN_ERROR(conv_transpose2d(xt, wt, ones({4}), 1, 0, 0, 2), "[conv_transpose2d] bias [4] does not match weight [4, 3, 2, 2] (expected [6]");
  EXPECT_KILN_ERROR(conv_transpose2d(xt, wt, {}, 1, 3), "[conv_transpose2d] output size would be -2");
  EXPECT_KILN_ERROR(conv_transpose1d(ones({1, 4, 3}), ones({4, 3, 2}), {}, 1, 0, 1), "[conv_transpose1d] output_padding 1 must be smaller than stride 1 or dilation 1");
}

TEST(Conv, F32GeometriesReachOneDnn) {
  // The op layer's bottom/right padding must be the one oneDNN accepts
  // (NOTE [Conv geometry]); a wrong one would silently fall back to the loops.
  Generator gen(11);
  Tensor x = randn({2, 3, 8, 7}, gen).requires_grad_(), w = randn({4, 3, 2, 3}, gen).requires_grad_();
  Tensor y = conv2d(x, w, {}, 3, {1, 0});  // rows and columns left over at the end
  EXPECT_NE(backend::cpu::last_conv_impl(), "ref");
  y.backward(ones_like(y));
  EXPECT_NE(backend::cpu::last_conv_impl(), "ref");
  conv2d(x, w, {}, 1, "same", {2, 1});
  EXPECT_NE(backend::cpu::last_conv_impl(), "ref");
  Tensor t = conv_transpose2d(randn({2, 3, 4, 5}, gen), randn({3, 2, 3, 3}, gen), {}, 2, 1, 1);
  EXPECT_NE(backend::cpu::last_conv_impl(), "ref");
  EXPECT_EQ(t.shape(), (Shape{2, 2, 8, 10}));
}

TEST(Conv, ShapesAndUnbatched) {
  Generator gen(9);
  Tensor x = randn({3, 8, 9}, gen), w = randn({5, 3, 3, 2}, gen);
  Tensor y = conv2d(x, w, {}, 1, "same");
  EXPECT_EQ(y.shape(), (Shape{5, 8, 9}));
  EXPECT_TRUE(all_close(y, squeeze(conv2d(unsqueeze(x, 0), w, {}, 1, "same"), 0)));
  EXPECT_EQ(conv_transpose2d(randn({2, 3, 4, 5}, gen), randn({3, 6, 3, 3}, gen), {}, 2, 1, 1).shape(),
            (Shape{2, 6, 8, 10}));
  EXPECT_EQ(conv1d(randn({2, 3, 10}, gen), randn({4, 3, 3}, gen), {}, 3).shape(), (Shape{2, 4, 3}));
  EXPECT_EQ(conv2d(zeros({0, 3, 5, 5}), zeros({2, 3, 3, 3})).shape(), (Shape{0, 2, 3, 3}));
}

// Spec 000's SAME / VALID (either case). SAME keeps ceil(in / stride)
// outputs for any stride, as JAX does: checked against an explicit
// (asymmetric) zero pad followed by a VALID convolution.
TEST(ConvPadding, SameForAnyStrideMatchesExplicitPadding) {
  Generator gen(21);
  Tensor x = randn({2, 3, 7, 6}, gen), w = randn({4, 3, 3, 2}, gen), b = randn({4}, gen);
  struct Case {
    Size2 stride, dilation;
    std::vector<int64_t> pad;  // {left, right, top, bottom}, the JAX rule worked by hand
    Shape out;
  };
  const Case cases[] = {
      {1, 1, {0, 1, 1, 1}, {2, 4, 7, 6}},          // stride 1: PyTorch's 'same'
      {2, 1, {0, 0, 1, 1}, {2, 4, 4, 3}},          // H: out 4, total 2; W: out 3, total 0
      {{3, 2}, 2, {0, 1, 2, 2}, {2, 4, 3, 3}},  // H: out 3, total 4 (dilated K 5); W: out 3, total 1 (dilated K 3)
  };
  for (const Case& c : cases) {
    Tensor y = conv2d(x, w, b, c.stride, "SAME", c.dilation);
    EXPECT_EQ(y.shape(), c.out);
    EXPECT_TRUE(all_close(y, conv2d(pad(x, c.pad), w, b, c.stride, "VALID", c.dilation), 1e-5, 1e-5));
    EXPECT_TRUE(equal(y, conv2d(x, w, b, c.stride, "same", c.dilation)));
  }
  EXPECT_EQ(conv1d(randn({1, 3, 10}, gen), randn({2, 3, 4}, gen), {}, 3, "SAME").shape(), (Shape{1, 2, 4}));
}

}  // namespace
}  // namespace kiln
