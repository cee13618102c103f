// Tests of layer_norm, rms_norm and batch_norm: PyTorch goldens (forward,
// gradients, running-buffer updates under both variance conventions), the
// fused kernels against backend::cpu::ref over shapes and dtypes, thread-count
// independence, gradchecks in f64 (first order, non-contiguous inputs, and
// second order through the create_graph fallback) and error messages.
#include <functional>
#include <map>

#include "kiln/ops/norm.h"
#include "src/backend/cpu/nn/norm.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;
using Inputs = std::map<std::string, Tensor>;

Tensor opt(const Inputs& in, const std::string& k) {
  auto it = in.find(k);
  return it == in.end() ? Tensor() : it->second;
}

// Loads a golden case's inputs; those with grads in the file become leaves.
Inputs load_inputs(const nlohmann::json& c) {
  Inputs in;
  for (const auto& [k, v] : c.at("inputs").items()) {
    Tensor t = golden_tensor(v);
    if (c.at("grads").contains(k)) t.requires_grad_(true);
    in[k] = t;
  }
  return in;
}

void check_grads(const nlohmann::json& c, const Inputs& in, double tol) {
  for (const auto& [k, v] : c.at("grads").items()) {
    SCOPED_TRACE("grad of " + k);
    ASSERT_TRUE(in.at(k).grad().defined());
    EXPECT_TRUE(all_close(in.at(k).grad(), golden_tensor(v), tol, tol));
  }
}

TEST(NormGolden, LayerAndRmsMatchPyTorch) {
  using Fn = std::function<Tensor(const Inputs&)>;
  const std::map<std::string, Fn> fns = {
      {"ln_3d_wb", [](const Inputs& i) { return layer_norm(i.at("x"), {8}, i.at("w"), i.at("b")); }},
      {"ln_two_dims", [](const Inputs& i) { return layer_norm(i.at("x"), {3, 4}, i.at("w"), i.at("b"), 1e-3); }},
      {"ln_plain", [](const Inputs& i) { return layer_norm(i.at("x"), {6}); }},
      {"ln_f32", [](const Inputs& i) { return layer_norm(i.at("x"), {16}, i.at("w"), i.at("b")); }},
      {"rms_w", [](const Inputs& i) { return rms_norm(i.at("x"), {8}, i.at("w")); }},
      {"rms_two_dims_eps", [](const Inputs& i) { return rms_norm(i.at("x"), {3, 4}, {}, 1e-2); }},
  };
  size_t seen = 0;
  for (const auto& c : golden("norm_layer").at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE(name);
    auto it = fns.find(name);
    ASSERT_NE(it, fns.end()) << "no kiln call for golden case " << name;
    ++seen;
    Inputs in = load_inputs(c);
    const double tol = in.at("x").dtype() == kF32 ? 1e-5 : 1e-12;
    Tensor out = it->second(in);
    EXPECT_TRUE(all_close(out, golden_tensor(c.at("out")), tol, tol));
    out.backward(in.at("gy"));
    check_grads(c, in, tol);
    // The same from a non-contiguous input.
    Inputs nc = in;
    nc["x"] = noncontiguous(in.at("x").detach());
    EXPECT_TRUE(all_close(it->second(nc), golden_tensor(c.at("out")), tol, tol)) << "non-contiguous";
  }
  EXPECT_EQ(seen, fns.size());
}

TEST(NormGolden, BatchNormMatchesPyTorch) {
  size_t seen = 0;
  for (const auto& c : golden("norm_batch").at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE(name);
    ++seen;
    const bool training = name.rfind("bn_train", 0) == 0;
    for (bool unbiased : {true, false}) {
      SCOPED_TRACE(unbiased ? "unbiased running var" : "biased running var");
      Inputs in = load_inputs(c);
      Tensor rm = opt(in, "rm"), rv = opt(in, "rv");
      if (rm.defined()) rm = rm.clone(), rv = rv.clone();
      BatchNormOptions o{.momentum = 0.2, .eps = training ? 1e-5 : 1e-3, .unbiased_running_var = unbiased};
      Tensor out = batch_norm(in.at("x"), rm, rv, opt(in, "w"), opt(in, "b"), training, o);
      EXPECT_TRUE(all_close(out, golden_tensor(c.at("out")), 1e-12, 1e-12));
      out.backward(in.at("gy"));
      check_grads(c, in, 1e-11);
      if (training && c.contains("extra") && c.at("extra").contains("rm_new")) {
        const auto& e = c.at("extra");
        EXPECT_TRUE(all_close(rm, golden_tensor(e.at("rm_new")), 1e-13, 1e-13));
        EXPECT_TRUE(all_close(rv, golden_tensor(e.at(unbiased ? "rv_new_unbiased" : "rv_new_biased")), 1e-13, 1e-13));
      }
      if (!training) {  // eval leaves the buffers alone
        EXPECT_TRUE(testing::equal(rm, in.at("rm")));
        EXPECT_TRUE(testing::equal(rv, in.at("rv")));
      }
    }
  }
  EXPECT_EQ(seen, 5u);
}

// ---- fast kernels against backend::cpu::ref ----

Tensor rnd(const Shape& s, DType t, uint64_t seed, double scale = 1.0, double shift = 0.0) {
  Generator gen(seed);
  return to(add(mul(randn(s, gen, {.dtype = kF64}), scale), shift), t);
}

double tol_for(DType t) { return t == kBF16 ? 2e-2 : t == kF32 ? 2e-5 : 1e-12; }

TEST(NormKernels, LayerNormFastMatchesRef) {
  for_each_kernel_isa([&](KernelIsa) {
    const std::vector<std::pair<int64_t, int64_t>> shapes = {{7, 13}, {64, 1000}, {3, 5000}, {1, 1}, {300, 64}, {0, 5}};
    uint64_t seed = 0;
    for (auto [M, N] : shapes)
      for (DType t : {kF32, kF64, kBF16})
        for (int affine = 0; affine < 3; ++affine)
          for (bool rms : {false, true}) {
            SCOPED_TRACE(fmt::format("[{}, {}] {} affine {} rms {}", M, N, name(t), affine, rms));
            const DType sd = t == kF64 ? kF64 : kF32;
            Tensor x = rnd({M, N}, t, ++seed, 3.0, 5.0);  // offset mean: tests the centring
            Tensor w = affine ? rnd({N}, t, ++seed) : Tensor(), b = affine == 2 ? rnd({N}, t, ++seed) : Tensor();
            Tensor o1 = Tensor::empty({M, N}, t), o2 = Tensor::empty({M, N}, t);
            Tensor m1 = rms ? Tensor() : Tensor::empty({M}, sd), m2 = rms ? Tensor() : Tensor::empty({M}, sd);
            Tensor r1 = Tensor::empty({M}, sd), r2 = Tensor::empty({M}, sd);
            backend::cpu::layer_norm(x, w, b, 1e-5, rms, o1, m1, r1);
            backend::cpu::ref::layer_norm(x, w, b, 1e-5, rms, o2, m2, r2);
            const double tol = tol_for(t);
            EXPECT_TRUE(all_close(o1, o2, tol, tol)) << "out";
            EXPECT_TRUE(all_close(r1, r2, tol, tol)) << "rstd";
            if (!rms) {
              EXPECT_TRUE(all_close(m1, m2, tol, tol)) << "mean";
            }
            Tensor g = rnd({M, N}, t, ++seed);
            Tensor gx1 = Tensor::empty({M, N}, t), gx2 = Tensor::empty({M, N}, t);
            Tensor gw1 = w.defined() ? Tensor::empty({N}, t) : Tensor(), gw2 = w.defined() ? Tensor::empty({N}, t) : Tensor();
            Tensor gb1 = Tensor::empty({N}, t), gb2 = Tensor::empty({N}, t);
            backend::cpu::layer_norm_backward(g, x, w, m2, r2, rms, gx1, gw1, gb1);
            backend::cpu::ref::layer_norm_backward(g, x, w, m2, r2, rms, gx2, gw2, gb2);
            // Sums over M rows: scale the tolerance with the row count for f32/bf16.
            const double stol = t == kF64 ? 1e-11 : tol * 4;
            EXPECT_TRUE(all_close(gx1, gx2, tol * 4, tol * 4)) << "gx";
            if (w.defined()) {
              EXPECT_TRUE(all_close(gw1, gw2, stol, stol * double(std::max<int64_t>(M, 1)))) << "gw";
            }
            EXPECT_TRUE(all_close(gb1, gb2, stol, stol * double(std::max<int64_t>(M, 1)))) << "gb";
          }
  });
}

TEST(NormKernels, BatchNormFastMatchesRef) {
  for_each_kernel_isa([&](KernelIsa) {
    const std::vector<Shape> shapes = {{4, 3, 5}, {8, 16, 49}, {64, 7}, {2, 3, 1}, {3, 2, 4, 4}, {16, 4, 300}};
    uint64_t seed = 100;
    for (const Shape& s : shapes)
      for (DType t : {kF32, kF64, kBF16})
        for (bool affine : {false, true})
          for (bool training : {false, true}) {
            SCOPED_TRACE(fmt::format("{} {} affine {} training {}", to_string(s), name(t), affine, training));
            const DType sd = t == kF64 ? kF64 : kF32;
            const int64_t C = s[1];
            Tensor x = rnd(s, t, ++seed, 2.0, 3.0);
            Tensor w = affine ? rnd({C}, t, ++seed) : Tensor(), b = affine ? rnd({C}, t, ++seed) : Tensor();
            Tensor m1 = Tensor::empty({C}, sd), v1 = Tensor::empty({C}, sd), m2 = Tensor::empty({C}, sd),
                   v2 = Tensor::empty({C}, sd);
            backend::cpu::batch_norm_stats(x, m1, v1);
            backend::cpu::ref::batch_norm_stats(x, m2, v2);
            const double tol = tol_for(t);
            EXPECT_TRUE(all_close(m1, m2, tol, tol)) << "mean";
            EXPECT_TRUE(all_close(v1, v2, tol, tol)) << "var";
            Tensor inv = rsqrt(add(v2, 1e-5));
            Tensor o1 = Tensor::empty(s, t), o2 = Tensor::empty(s, t);
            backend::cpu::batch_norm_apply(x, m2, inv, w, b, o1);
            backend::cpu::ref::batch_norm_apply(x, m2, inv, w, b, o2);
            EXPECT_TRUE(all_close(o1, o2, tol * 4, tol * 4)) << "out";
            Tensor g = rnd(s, t, ++seed);
            Tensor gx1 = Tensor::empty(s, t), gx2 = Tensor::empty(s, t);
            Tensor gw1 = Tensor::empty({C}, t), gw2 = Tensor::empty({C}, t), gb1 = Tensor::empty({C}, t),
                   gb2 = Tensor::empty({C}, t);
            backend::cpu::batch_norm_backward(g, x, m2, inv, w, training, gx1, gw1, gb1);
            backend::cpu::ref::batch_norm_backward(g, x, m2, inv, w, training, gx2, gw2, gb2);
            const double n = double(x.numel() / C);
            EXPECT_TRUE(all_close(gx1, gx2, tol * 8, tol * 8)) << "gx";
            EXPECT_TRUE(all_close(gw1, gw2, tol * 4, tol * n)) << "gw";
            EXPECT_TRUE(all_close(gb1, gb2, tol * 4, tol * n)) << "gb";
          }
  });
}

struct ThreadCount {
  int saved = get_num_threads();
  ~ThreadCount() { set_num_threads(saved); }
};

TEST(NormKernels, SameBitsForAnyThreadCount) {
  for_each_kernel_isa([&](KernelIsa) {
    ThreadCount restore;
    Tensor x = rnd({2000, 96}, kF32, 1), w = rnd({96}, kF32, 2), b = rnd({96}, kF32, 3), g = rnd({2000, 96}, kF32, 4);
    Tensor xb = rnd({32, 24, 100}, kF32, 5), gb = rnd({32, 24, 100}, kF32, 6), wb = rnd({24}, kF32, 7);
    std::vector<std::vector<Tensor>> runs;
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      std::vector<Tensor> r;
      Tensor o = Tensor::empty({2000, 96}), m = Tensor::empty({2000}), s = Tensor::empty({2000});
      backend::cpu::layer_norm(x, w, b, 1e-5, false, o, m, s);
      Tensor gx = Tensor::empty({2000, 96}), gw = Tensor::empty({96}), gbias = Tensor::empty({96});
      backend::cpu::layer_norm_backward(g, x, w, m, s, false, gx, gw, gbias);
      Tensor bm = Tensor::empty({24}), bv = Tensor::empty({24});
      backend::cpu::batch_norm_stats(xb, bm, bv);
      Tensor bgx = Tensor::empty(xb.shape()), bgw = Tensor::empty({24}), bgb = Tensor::empty({24});
      backend::cpu::batch_norm_backward(gb, xb, bm, rsqrt(add(bv, 1e-5)), wb, true, bgx, bgw, bgb);
      runs.push_back({o, gx, gw, gbias, bm, bv, bgx, bgw, bgb});
    }
    for (size_t k = 1; k < runs.size(); ++k)
      for (size_t i = 0; i < runs[0].size(); ++i) EXPECT_TRUE(testing::equal(runs[k][i], runs[0][i])) << k << " " << i;
  });
}

// ---- gradchecks (f64) ----

TEST(NormGrad, LayerNorm) {
  uint64_t seed = 200;
  for (const Shape& s : std::vector<Shape>{{5}, {3, 4}, {2, 3, 4}})
    for (int k = 1; k <= std::min<int>(2, int(s.size())); ++k)
      for (bool nc : {false, true}) {
        Shape ns(std::span<const int64_t>(s).subspan(s.size() - size_t(k)));
        SCOPED_TRACE(fmt::format("shape {} normalized {}{}", to_string(s), to_string(ns), nc ? " nc" : ""));
        Tensor x = leaf(s, ++seed, -2, 2);
        if (nc) x = noncontiguous(x);
        Tensor w = leaf(ns, ++seed, 0.5, 1.5), b = leaf(ns, ++seed);
        EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return layer_norm(in[0], ns, in[1], in[2]); },
                         {x, w, b});
        EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return layer_norm(in[0], ns, {}, {}, 1e-3); }, {x});
        EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return rms_norm(in[0], ns, in[1]); }, {x, w});
        EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return rms_norm(in[0], ns); }, {x});
      }
}

TEST(NormGrad, BatchNorm) {
  uint64_t seed = 300;
  for (const Shape& s : std::vector<Shape>{{4, 3}, {3, 2, 5}, {2, 3, 2, 2}})
    for (bool nc : {false, true})
      for (bool training : {true, false}) {
        SCOPED_TRACE(fmt::format("shape {}{} training {}", to_string(s), nc ? " nc" : "", training));
        const int64_t C = s[1];
        Tensor x = leaf(s, ++seed, -2, 2);
        if (nc) x = noncontiguous(x);
        Tensor w = leaf({C}, ++seed, 0.5, 1.5), b = leaf({C}, ++seed);
        Tensor rm = rnd({C}, kF64, ++seed), rv = add(abs(rnd({C}, kF64, ++seed)), 0.5);
        // In training the buffers are left undefined so repeated calls see the same function.
        Tensor bm = training ? Tensor() : rm, bv = training ? Tensor() : rv;
        EXPECT_GRADCHECK(
            [&](const std::vector<Tensor>& in) { return batch_norm(in[0], bm, bv, in[1], in[2], training); },
            {x, w, b});
        EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return batch_norm(in[0], bm, bv, {}, {}, training); },
                         {x});
      }
}

TEST(NormGrad, SecondOrderThroughCreateGraph) {
  Tensor x = leaf({3, 4}, 400, -2, 2), w = leaf({4}, 401, 0.5, 1.5), b = leaf({4}, 402);
  auto r1 = gradcheck_second_order([](const std::vector<Tensor>& in) { return layer_norm(in[0], {4}, in[1], in[2]); }, {x, w, b});
  EXPECT_TRUE(r1.ok) << r1.message;
  auto r2 = gradcheck_second_order([](const std::vector<Tensor>& in) { return rms_norm(in[0], {4}, in[1]); }, {x, w});
  EXPECT_TRUE(r2.ok) << r2.message;
  Tensor xb = leaf({3, 2, 2}, 403, -2, 2), wb = leaf({2}, 404, 0.5, 1.5), bb = leaf({2}, 405);
  auto r3 = gradcheck_second_order([](const std::vector<Tensor>& in) { return batch_norm(in[0], {}, {}, in[1], in[2], true); },
                                   {xb, wb, bb});
  EXPECT_TRUE(r3.ok) << r3.message;
  Tensor rm = rnd({2}, kF64, 406), rv = add(abs(rnd({2}, kF64, 407)), 0.5);
  auto r4 = gradcheck_second_order([&](const std::vector<Tensor>& in) { return batch_norm(in[0], rm, rv, in[1], in[2], false); },
                                   {xb, wb, bb});
  EXPECT_TRUE(r4.ok) << r4.message;
}

// ---- behaviour ----

TEST(Norm, Bf16FollowsF32) {
  Tensor x = rnd({6, 40}, kF32, 9, 2.0, 1.0), w = rnd({40}, kF32, 10), b = rnd({40}, kF32, 11);
  Tensor want = layer_norm(x, {40}, w, b);
  Tensor got = layer_norm(to(x, kBF16), {40}, to(w, kBF16), to(b, kBF16));
  EXPECT_EQ(got.dtype(), kBF16);
  EXPECT_TRUE(all_close(to(got, kF32), want, 3e-2, 3e-2));
  Tensor xb = rnd({4, 3, 5}, kF32, 12);
  EXPECT_TRUE(all_close(to(batch_norm(to(xb, kBF16), {}, {}, {}, {}, true), kF32), batch_norm(xb, {}, {}, {}, {}, true),
                        3e-2, 3e-2));
  EXPECT_TRUE(all_close(to(rms_norm(to(x, kBF16), {40}), kF32), rms_norm(x, {40}), 3e-2, 3e-2));
}

TEST(Norm, LayerNormRowsAreStandardised) {
  Tensor x = rnd({6, 50}, kF32, 7, 10.0, 100.0);
  Tensor y = layer_norm(x, {50});
  EXPECT_TRUE(all_close(mean(y, {1}), zeros({6}), 0, 1e-5));
  EXPECT_TRUE(all_close(var(y, {1}, false), ones({6}), 1e-3, 1e-3));
  Tensor r = rms_norm(x, {50});
  EXPECT_TRUE(all_close(mean(r * r, {1}), ones({6}), 1e-4, 1e-4));
}

TEST(Norm, BatchNormRunningBuffers) {
  Tensor x = rnd({8, 3, 5}, kF64, 8, 2.0, 1.0);
  Tensor rm = zeros({3}, {.dtype = kF64}), rv = ones({3}, {.dtype = kF64});
  Tensor y = batch_norm(x, rm, rv, {}, {}, true, {.momentum = 0.25});
  Tensor bmean = mean(x, {0, 2}), bvar = var(x, {0, 2}, false);
  EXPECT_TRUE(all_close(rm, bmean * 0.25, 1e-13, 1e-13));
  EXPECT_TRUE(all_close(rv, 0.75 + bvar * 0.25, 1e-13, 1e-13));  // SPECS L8: biased by default
  EXPECT_FALSE(rm.requires_grad());
  // Eval uses the buffers: with the batch's own statistics it reproduces training's output.
  Tensor y2 = batch_norm(x, bmean, bvar, {}, {}, false);
  EXPECT_TRUE(all_close(y2, y, 1e-12, 1e-12));
  // Undefined buffers are fine in training (track_running_stats=False).
  EXPECT_NO_THROW(batch_norm(x, {}, {}, {}, {}, true));
}

TEST(NormErrors, Messages) {
  Tensor x = ones({2, 3, 4});
  EXPECT_KILN_ERROR(layer_norm(x, {3}), "[layer_norm] normalized_shape [3] does not match the trailing dims of input [2, 3, 4]");
  EXPECT_KILN_ERROR(layer_norm(x, {2, 3, 4, 5}), "does not match the trailing dims");
  EXPECT_KILN_ERROR(layer_norm(x, {}), "[layer_norm] normalized_shape must have at least one dim");
  EXPECT_KILN_ERROR(layer_norm(x, {4}, ones({3})), "[layer_norm] weight of shape [3] does not match [4] (input [2, 3, 4])");
  EXPECT_KILN_ERROR(layer_norm(x, {4}, ones({4}), ones({5})), "[layer_norm] bias of shape [5] does not match [4]");
  EXPECT_KILN_ERROR(layer_norm(x, {4}, ones({4}, {.dtype = kF64})), "[layer_norm] weight has dtype f64 but input has dtype f32");
  EXPECT_KILN_ERROR(layer_norm(ones({2, 3}, {.dtype = kI64}), {3}), "[layer_norm] expects a floating input (f32, f64, bf16), got i64 [2, 3]");
  EXPECT_KILN_ERROR(layer_norm(x, {4}, {}, {}, -1.0), "[layer_norm] eps must be finite and >= 0, got -1");
  EXPECT_KILN_ERROR(layer_norm(Tensor(), {4}), "[layer_norm] input is an undefined tensor");
  EXPECT_KILN_ERROR(rms_norm(x, {3, 3}), "[rms_norm] normalized_shape [3, 3] does not match the trailing dims of input [2, 3, 4]");
  EXPECT_KILN_ERROR(rms_norm(x, {4}, ones({2, 2})), "[rms_norm] weight of shape [2, 2] does not match [4]");
  EXPECT_KILN_ERROR(layer_norm(zeros({2, 0}), {0}), "[layer_norm] normalized_shape [0] has no elements");

  Tensor rm = zeros({3}), rv = ones({3});
  EXPECT_KILN_ERROR(batch_norm(ones({4}), rm, rv, {}, {}, true), "[batch_norm] expects input [B, C], [B, C, L] or [B, C, H, W], got [4]");
  EXPECT_KILN_ERROR(batch_norm(x, zeros({4}), ones({4}), {}, {}, true),
                    "[batch_norm] running_mean of shape [4] does not match the 3 channels of input [2, 3, 4]");
  EXPECT_KILN_ERROR(batch_norm(x, rm, ones({2}), {}, {}, true), "[batch_norm] running_var of shape [2] does not match the 3 channels");
  EXPECT_KILN_ERROR(batch_norm(x, rm, {}, {}, {}, true), "[batch_norm] running_mean and running_var must both be given");
  EXPECT_KILN_ERROR(batch_norm(x, {}, {}, {}, {}, false), "[batch_norm] running_mean and running_var are required in eval mode");
  EXPECT_KILN_ERROR(batch_norm(x, rm, rv, ones({4}), {}, true), "[batch_norm] weight of shape [4] does not match [3]");
  EXPECT_KILN_ERROR(batch_norm(x, rm, rv, {}, ones({3}, {.dtype = kF64}), true), "[batch_norm] bias has dtype f64 but input has dtype f32");
  EXPECT_KILN_ERROR(batch_norm(ones({1, 3}), rm, rv, {}, {}, true),
                    "[batch_norm] Expected more than 1 value per channel when training, got input of shape [1, 3]");
  EXPECT_KILN_ERROR(batch_norm(ones({2, 3}, {.dtype = kI32}), rm, rv, {}, {}, true), "[batch_norm] expects a floating input");
  EXPECT_KILN_ERROR(batch_norm(x, rm, rv, {}, {}, true, {.eps = -1}), "[batch_norm] eps must be finite and >= 0");
  EXPECT_KILN_ERROR(batch_norm(x, rm, rv, {}, {}, true, {.momentum = NAN}), "[batch_norm] momentum must be finite, got nan");
  EXPECT_KILN_ERROR(batch_norm(x, zeros({3}, {.dtype = kI64}), rv, {}, {}, true), "[batch_norm] running_mean must be floating, got i64");
  EXPECT_KILN_ERROR(batch_norm(Tensor(), rm, rv, {}, {}, true), "[batch_norm] input is an undefined tensor");
  // A failed call leaves the running buffers untouched.
  EXPECT_TRUE(testing::equal(rm, zeros({3})));
  // Eval with one value per channel is fine.
  EXPECT_NO_THROW(batch_norm(ones({1, 3}), rm, rv, {}, {}, false));
}

}  // namespace
}  // namespace kiln
