// Tests of the losses: PyTorch goldens (forward and gradients), the fused
// kernels against backend::cpu::ref, masked cross-entropy (valid-count mean, all
// masked gives 0 and zero gradient), gradchecks in f64 (first order with
// targets constant or, for bce, differentiable; second order through the
// create_graph fallback) and error messages.
#include <algorithm>
#include <functional>
#include <map>

#include "kiln/ops/loss.h"
#include "src/backend/cpu/nn/loss.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;
using Inputs = std::map<std::string, Tensor>;

// A case's inputs: each argument names a tensor stored once in the file's "inputs".
Inputs load_inputs(const nlohmann::json& file, const nlohmann::json& c) {
  Inputs in;
  for (const auto& [k, v] : c.at("inputs").items()) {
    Tensor t = golden_tensor(file.at("inputs").at(v.get<std::string>()));
    if (c.at("grads").contains(k)) t.requires_grad_(true);
    in[k] = t;
  }
  return in;
}

// f64 cases are held to f64_tol, f32 ones to 2e-6.
void run_golden(const std::string& file, const std::map<std::string, std::function<Tensor(const Inputs&)>>& fns,
                double f64_tol) {
  size_t seen = 0;
  const auto& j = golden(file);
  for (const auto& c : j.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE(name);
    auto it = fns.find(name);
    ASSERT_NE(it, fns.end()) << "no kiln call for golden case " << name;
    ++seen;
    Inputs in = load_inputs(j, c);
    double tol = f64_tol;
    Tensor out = it->second(in);
    Tensor want = golden_tensor(c.at("out"));
    if (out.dtype() == kF32) tol = std::max(tol, 2e-6);
    EXPECT_TRUE(all_close(out, want, tol, tol));
    if (out.dim() > 0) sum(out * in.at("gy")).backward();
    else out.backward();
    for (const auto& [k, v] : c.at("grads").items()) {
      SCOPED_TRACE("grad of " + k);
      ASSERT_TRUE(in.at(k).grad().defined());
      EXPECT_TRUE(all_close(in.at(k).grad(), golden_tensor(v), tol, tol));
    }
  }
  EXPECT_EQ(seen, fns.size());
}

TEST(LossGolden, CrossEntropyMatchesPyTorch) {
  using R = Reduction;
  auto ce = [](CrossEntropyOptions o) {
    return [o](const Inputs& i) { return cross_entropy(i.at("x"), i.at("t"), o); };
  };
  run_golden("loss_ce",
             {{"ce_last_none", ce({.reduction = R::None})},
              {"ce_last_sum", ce({.reduction = R::Sum})},
              {"ce_last_mean", ce({})},
              {"ce_class1_mean", ce({.class_dim = 1})},
              {"ce_class1_none", ce({.reduction = R::None, .class_dim = 1})},
              {"ce_ignore_default_mean", ce({})},
              {"ce_ignore2_sum", ce({.reduction = R::Sum, .ignore_index = 2})},
              {"ce_smooth_mean", ce({.label_smoothing = 0.1})},
              {"ce_smooth_ignore_none", ce({.reduction = R::None, .label_smoothing = 0.2})},
              {"ce_f32_i32_mean", ce({})},
              {"ce_masked_mean", [](const Inputs& i) { return masked_cross_entropy(i.at("x"), i.at("t"), i.at("m")); }},
              {"ce_class_weight_mean",
               [](const Inputs& i) { return cross_entropy(i.at("x"), i.at("t"), {.weight = i.at("w")}); }},
              {"ce_class_weight_class1_none", [](const Inputs& i) {
                 return cross_entropy(i.at("x"), i.at("t"),
                                      {.reduction = R::None, .class_dim = 1, .weight = i.at("w").slice(0, 0, 4)});
               }}},
             1e-12);
}

TEST(LossGolden, CrossEntropyF32Tolerance) {
  // An f64 golden case rerun in f32, also from a non-contiguous input with the class dim 1.
  const auto& j = golden("loss_ce");
  bool found = false;
  for (const auto& cs : j.at("cases"))
    if (cs.at("name") == "ce_class1_mean") {
      found = true;
      Inputs in = load_inputs(j, cs);
      Tensor x = to(in.at("x").detach(), kF32);
      EXPECT_TRUE(all_close(cross_entropy(x, in.at("t"), {.class_dim = 1}), to(golden_tensor(cs.at("out")), kF32),
                            1e-5, 1e-6));
      EXPECT_TRUE(all_close(cross_entropy(noncontiguous(x), in.at("t"), {.class_dim = 1}),
                            to(golden_tensor(cs.at("out")), kF32), 1e-5, 1e-6))
          << "non-contiguous";
    }
  EXPECT_TRUE(found) << "golden case ce_class1_mean missing";
}

TEST(LossGolden, PointwiseMatchPyTorch) {
  using R = Reduction;
  std::map<std::string, std::function<Tensor(const Inputs&)>> fns;
  for (auto [red, r] : {std::pair{"none", R::None}, std::pair{"sum", R::Sum}, std::pair{"mean", R::Mean}}) {
    const std::string s = red;
    fns["bcel_" + s] = [r](const Inputs& i) { return binary_cross_entropy_with_logits(i.at("x"), i.at("y"), {}, {}, r); };
    fns["mse_" + s] = [r](const Inputs& i) { return mse_loss(i.at("x"), i.at("y"), r); };
    fns["l1_" + s] = [r](const Inputs& i) { return l1_loss(i.at("x"), i.at("y"), r); };
    fns["smooth_l1_" + s] = [r](const Inputs& i) { return smooth_l1_loss(i.at("x"), i.at("y"), r); };
  }
  fns["bcel_weights_mean"] = [](const Inputs& i) {
    return binary_cross_entropy_with_logits(i.at("x"), i.at("y"), i.at("w"), i.at("pw"));
  };
  fns["bce_none"] = [](const Inputs& i) { return binary_cross_entropy(i.at("x"), i.at("y"), {}, R::None); };
  fns["bce_mean"] = [](const Inputs& i) { return binary_cross_entropy(i.at("x"), i.at("y")); };
  fns["bce_weight_sum"] = [](const Inputs& i) { return binary_cross_entropy(i.at("x"), i.at("y"), i.at("w"), R::Sum); };
  fns["smooth_l1_beta05_mean"] = [](const Inputs& i) { return smooth_l1_loss(i.at("x"), i.at("y"), R::Mean, 0.5); };
  run_golden("loss_pointwise", fns, 1e-12);
}

// ---- fast kernels against backend::cpu::ref ----

Tensor rnd(const Shape& s, DType t, uint64_t seed, double scale = 1.0) {
  Generator gen(seed);
  return to(mul(randn(s, gen, {.dtype = kF64}), scale), t);
}

TEST(LossKernels, CrossEntropyFastMatchesRef) {
  for_each_kernel_isa([&](KernelIsa) {
    uint64_t seed = 0;
    for (auto [R, C] : std::vector<std::pair<int64_t, int64_t>>{{768, 65}, {7, 3}, {5, 3000}, {1, 1}, {300, 17}})
      for (DType t : {kF32, kF64, kBF16})
        for (DType it : {kI32, kI64})
          for (int variant = 0; variant < 3; ++variant) {  // plain; weights + ignore; smoothing
            SCOPED_TRACE(fmt::format("[{}, {}] {} {} variant {}", R, C, name(t), name(it), variant));
            Tensor x = rnd({R, C}, t, ++seed, 4.0);
            Generator gen(++seed);
            Tensor tg = randint(0, C, {R}, gen, {.dtype = it});
            if (variant == 1 && R > 2) {
              tg = where(lt(rand({R}, gen), 0.3), full({R}, -100, {.dtype = it}), tg);
            }
            Tensor w = variant == 1 ? to(rand({R}, gen), t) : Tensor();
            const double s = variant == 2 ? 0.15 : 0.0;
            const DType sd = t == kF64 ? kF64 : kF32;
            Tensor l1 = Tensor::empty({R}, sd), l2 = Tensor::empty({R}, sd), r1 = Tensor::empty({R}, t),
                   r2 = Tensor::empty({R}, t);
            const double tol = t == kBF16 ? 2e-2 : t == kF32 ? 2e-5 : 1e-12;
            double t1, w1, t2, w2, t3, w3;
            Tensor p1 = zeros({R, C}, {.dtype = t}), p2 = zeros({R, C}, {.dtype = t});
            backend::cpu::cross_entropy(x, tg, w, -100, s, l1, {}, r1, &t1, &w1);
            backend::cpu::ref::cross_entropy(x, tg, w, -100, s, l2, p2, r2, &t2, &w2);
            Tensor l3 = Tensor::empty({R}, sd);
            backend::cpu::cross_entropy(x, tg, w, -100, s, l3, p1, {}, &t3, &w3);  // with probs
            EXPECT_TRUE(all_close(l3, l2, tol, tol)) << "lse with probs";
            EXPECT_NEAR(t3, t2, tol * (1 + std::abs(t2)) * 4);
            EXPECT_TRUE(all_close(p1, p2, tol, 1e-6)) << "probs";
            EXPECT_TRUE(all_close(l1, l2, tol, tol)) << "lse";
            EXPECT_TRUE(all_close(r1, r2, tol, tol)) << "rows";
            EXPECT_NEAR(t1, t2, tol * (1 + std::abs(t2)) * 4);
            EXPECT_NEAR(w1, w2, 1e-4 * (1 + w2));
            for (int64_t gn : {int64_t(1), R}) {
              Tensor g = rnd({gn}, t, ++seed);
              Tensor g1 = Tensor::empty({R, C}, t), g2 = Tensor::empty({R, C}, t), g3 = Tensor::empty({R, C}, t);
              backend::cpu::cross_entropy_backward(x, tg, w, -100, s, l2, {}, g, 0.7, g1);
              backend::cpu::ref::cross_entropy_backward(x, tg, w, -100, s, l2, {}, g, 0.7, g2);
              backend::cpu::cross_entropy_backward(x, tg, w, -100, s, l2, p1, g, 0.7, g3);
              EXPECT_TRUE(all_close(g1, g2, tol, tol)) << "grad, grad numel " << gn;
              EXPECT_TRUE(all_close(g3, g2, tol, tol)) << "grad from saved probs, grad numel " << gn;
            }
          }
  });
}

TEST(LossKernels, PointwiseFastMatchesRef) {
  for_each_kernel_isa([&](KernelIsa) {
    using K = backend::cpu::PointwiseLoss;
    uint64_t seed = 100;
    for (K kind : {K::mse, K::l1, K::smooth_l1, K::bce, K::bce_with_logits})
      for (int64_t n : {int64_t(1), int64_t(37), int64_t(40000)})
        for (DType t : {kF32, kF64, kBF16})
          for (bool weighted : {false, true}) {
            SCOPED_TRACE(fmt::format("kind {} n {} {} weighted {}", int(kind), n, name(t), weighted));
            Generator gen(++seed);
            Tensor x = kind == K::bce ? to(add(mul(rand({n}, gen), 0.98), 0.01), t) : rnd({n}, t, ++seed, 2.0);
            Tensor y = kind == K::bce || kind == K::bce_with_logits ? to(rand({n}, gen), t) : rnd({n}, t, ++seed, 2.0);
            Tensor w = weighted ? to(rand({n}, gen), t) : Tensor();
            Tensor pw = weighted && kind == K::bce_with_logits ? to(add(rand({n}, gen), 0.5), t) : Tensor();
            for (double beta : {1.0, 0.0}) {
              if (beta == 0.0 && kind != K::smooth_l1) continue;
              Tensor o1 = Tensor::empty({n}, t), o2 = Tensor::empty({n}, t);
              const double s1 = backend::cpu::pointwise_loss(kind, beta, x, y, w, pw, o1);
              const double s2 = backend::cpu::ref::pointwise_loss(kind, beta, x, y, w, pw, o2);
              const double tol = t == kBF16 ? 2e-2 : t == kF32 ? 1e-5 : 1e-12;
              EXPECT_TRUE(all_close(o1, o2, tol, tol));
              EXPECT_NEAR(backend::cpu::pointwise_loss(kind, beta, x, y, w, pw, {}), s1, 1e-9 * (1 + std::abs(s1)));
              EXPECT_NEAR(s1, s2, tol * (1 + std::abs(s2)));
              for (int64_t gn : {int64_t(1), n}) {
                Tensor g = rnd({gn}, t, ++seed);
                Tensor gx1 = Tensor::empty({n}, t), gy1 = Tensor::empty({n}, t), gx2 = Tensor::empty({n}, t),
                       gy2 = Tensor::empty({n}, t);
                backend::cpu::pointwise_loss_backward(kind, beta, x, y, w, pw, g, 0.5, gx1, gy1);
                backend::cpu::ref::pointwise_loss_backward(kind, beta == 0.0 ? 0.0 : beta, x, y, w, pw, g, 0.5, gx2, gy2);
                EXPECT_TRUE(all_close(gx1, gx2, tol, tol)) << "gx";
                EXPECT_TRUE(all_close(gy1, gy2, tol, tol)) << "gy";
              }
            }
          }
  });
}

// ---- masked cross-entropy (SPECS F2) ----

TEST(LossCrossEntropy, MaskedMeanDividesByValidCount) {
  Tensor x = rnd({5, 4}, kF64, 1);
  Tensor t = tensor<int64_t>({0, 1, 2, 3, 0}, {5});
  Tensor m = tensor<bool>({true, false, true, false, true}, {5});
  Tensor rows = cross_entropy(x, t, {.reduction = Reduction::None});
  Tensor want = sum(rows * to(m, kF64)) / 3.0;
  EXPECT_TRUE(all_close(masked_cross_entropy(x, t, m), want, 1e-13, 1e-13));
  // A float mask weighs rows and divides by its sum.
  Tensor fm = tensor<double>({0.5, 0.0, 1.0, 0.0, 2.0}, {5});
  EXPECT_TRUE(all_close(masked_cross_entropy(x, t, fm), sum(rows * fm) / 3.5, 1e-13, 1e-13));
  EXPECT_TRUE(all_close(masked_cross_entropy(x, t, m, {.reduction = Reduction::Sum}), sum(rows * to(m, kF64)), 1e-13, 1e-13));
}

TEST(LossCrossEntropy, AllMaskedGivesZeroLossAndGradient) {
  Tensor x = leaf({3, 4}, 2);
  Tensor t = tensor<int64_t>({0, 1, 2}, {3});
  Tensor loss = masked_cross_entropy(x, t, zeros({3}, {.dtype = kBool}));
  EXPECT_EQ(loss.item<double>(), 0.0);
  loss.backward();
  EXPECT_TRUE(testing::equal(x.grad(), zeros({3, 4}, {.dtype = kF64})));
  // All targets ignored: also 0 (PyTorch gives NaN here; kiln follows SPECS F2).
  Tensor y = leaf({3, 4}, 3);
  Tensor l2 = cross_entropy(y, full({3}, -100, {.dtype = kI64}));
  EXPECT_EQ(l2.item<double>(), 0.0);
  l2.backward();
  EXPECT_TRUE(testing::equal(y.grad(), zeros({3, 4}, {.dtype = kF64})));
}

TEST(LossCrossEntropy, LongRowsRecomputeTheSoftmax) {
  // Above 1024 classes the backward recomputes exp(x - lse) instead of
  // reading a saved softmax: the same gradient, (softmax - onehot) / R.
  for (int64_t C : {int64_t(1000), int64_t(3000)}) {
    SCOPED_TRACE(C);
    Tensor x = leaf({3, C}, 40, -3, 3);
    Tensor t = tensor<int64_t>({0, C - 1, 7}, {3});
    cross_entropy(x, t, {.label_smoothing = 0.1}).backward();
    Tensor q = to(one_hot(t, C), kF64) * 0.9 + 0.1 / double(C);
    EXPECT_TRUE(all_close(x.grad(), (softmax(x.detach(), 1) - q) / 3.0, 1e-12, 1e-15));
  }
}

TEST(LossCrossEntropy, StableForHugeLogits) {
  Tensor x = tensor<float>({1000, 0, -1000, 1000}, {2, 2});
  Tensor l = cross_entropy(x, tensor<int64_t>({0, 0}, {2}), {.reduction = Reduction::None});
  EXPECT_TRUE(all_close(l, tensor<float>({0.0f, 2000.0f}, {2}), 1e-6, 1e-6));
}

TEST(LossCrossEntropy, Bf16FollowsF32) {
  Tensor x = rnd({16, 10}, kF32, 5, 3.0);
  Generator gen(6);
  Tensor t = randint(0, 10, {16}, gen);
  Tensor xb = to(x, kBF16);
  xb.requires_grad_(true);
  Tensor xf = to(xb.detach(), kF32);  // the same rounded values in f32
  xf.requires_grad_(true);
  Tensor lb = cross_entropy(xb, t), lf = cross_entropy(xf, t);
  EXPECT_EQ(lb.dtype(), kBF16);
  EXPECT_TRUE(all_close(to(lb, kF32), lf, 1e-2, 1e-2));
  lb.backward();
  lf.backward();
  EXPECT_TRUE(all_close(to(xb.grad(), kF32), xf.grad(), 2e-2, 1e-3));
  EXPECT_TRUE(all_close(to(mse_loss(xb, to(x * 0.5, kBF16)), kF32), mse_loss(xf, to(to(x * 0.5, kBF16), kF32)), 1e-2,
                        1e-2));
}

// ---- gradchecks (f64) ----

TEST(LossGrad, CrossEntropy) {
  Tensor t = tensor<int64_t>({0, 3, 2, -100, 1}, {5});
  Tensor t32 = tensor<int32_t>({2, 1, 0, 1, 3}, {5});
  for (bool nc : {false, true})
    for (Reduction r : {Reduction::None, Reduction::Sum, Reduction::Mean}) {
      SCOPED_TRACE(fmt::format("nc {} reduction {}", nc, int(r)));
      Tensor x = leaf({5, 4}, 10, -2, 2);
      if (nc) x = noncontiguous(x);
      EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t, {.reduction = r}); }, {x});
      EXPECT_GRADCHECK(
          [&](const std::vector<Tensor>& in) {
            return cross_entropy(in[0], t32, {.reduction = r, .label_smoothing = 0.3});
          },
          {x});
      Tensor cw = tensor<double>({0.5, 2.0, 1.0, 0.25}, {4});
      EXPECT_GRADCHECK(
          [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t, {.reduction = r, .weight = cw}); }, {x});
      Tensor fm = tensor<double>({0.5, 1.0, 0.0, 1.0, 2.0}, {5});
      EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return masked_cross_entropy(in[0], t32, fm, {.reduction = r}); },
                       {x});
      // [N, C, L] with the class dim 1.
      Tensor x3 = leaf({2, 3, 4}, 11, -2, 2);
      if (nc) x3 = noncontiguous(x3);
      Tensor t3 = tensor<int64_t>({0, 1, 2, 0, 2, 2, 1, 0}, {2, 4});
      EXPECT_GRADCHECK(
          [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t3, {.reduction = r, .class_dim = 1}); },
          {x3});
    }
}

TEST(LossGrad, Pointwise) {
  for (Reduction r : {Reduction::None, Reduction::Sum, Reduction::Mean})
    for (bool nc : {false, true}) {
      SCOPED_TRACE(fmt::format("reduction {} nc {}", int(r), nc));
      Tensor x = leaf({4, 3}, 20, -2, 2), y = leaf({4, 3}, 21, -2, 2);
      Tensor p = leaf({4, 3}, 22, 0.1, 0.9), q = leaf({4, 3}, 23, 0, 1);
      if (nc) x = noncontiguous(x), p = noncontiguous(p);
      Tensor w = leaf({3}, 24, 0.5, 1.5), pw = leaf({3}, 25, 0.5, 2.0);
      Tensor wc = w.detach(), pwc = pw.detach();
      EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1], r); }, {x, y});
      EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return l1_loss(in[0], in[1], r); }, {x, y});
      EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return smooth_l1_loss(in[0], in[1], r); }, {x, y});
      EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return smooth_l1_loss(in[0], in[1], r, 0.7); }, {x, y});
      EXPECT_GRADCHECK(
          [&](const std::vector<Tensor>& in) { return binary_cross_entropy_with_logits(in[0], in[1], {}, {}, r); },
          {x, q});
      EXPECT_GRADCHECK(
          [&](const std::vector<Tensor>& in) { return binary_cross_entropy_with_logits(in[0], in[1], wc, pwc, r); },
          {x, q});
      EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return binary_cross_entropy(in[0], in[1], wc, r); },
                       {p, q});
      // Weights that need gradients take the composed path.
      EXPECT_GRADCHECK(
          [&](const std::vector<Tensor>& in) {
            return binary_cross_entropy_with_logits(in[0], in[1], in[2], in[3], r);
          },
          {x, q, w, pw});
      EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return binary_cross_entropy(in[0], in[1], in[2], r); },
                       {p, q, w});
    }
}

TEST(LossGrad, SecondOrderThroughCreateGraph) {
  Tensor x = leaf({4, 3}, 30, -2, 2), y = leaf({4, 3}, 31, 0, 1), w = leaf({3}, 32, 0.5, 1.5).detach();
  Tensor t = tensor<int64_t>({0, 2, -100, 1}, {4});
  Tensor m = tensor<bool>({true, true, true, false}, {4});
  auto r1 = gradcheck_second_order([&](const std::vector<Tensor>& in) { return masked_cross_entropy(in[0], t, m, {.label_smoothing = 0.1}); },
                                   {x});
  EXPECT_TRUE(r1.ok) << r1.message;
  auto r2 = gradcheck_second_order([&](const std::vector<Tensor>& in) { return binary_cross_entropy_with_logits(in[0], in[1], w, w); },
                                   {x, y});
  EXPECT_TRUE(r2.ok) << r2.message;
  auto r3 = gradcheck_second_order([](const std::vector<Tensor>& in) { return sum(mse_loss(in[0], in[1], Reduction::None)); },
                                   {x, y});
  EXPECT_TRUE(r3.ok) << r3.message;
  Tensor p = leaf({4, 3}, 33, 0.2, 0.8);
  auto r4 = gradcheck_second_order([](const std::vector<Tensor>& in) { return binary_cross_entropy(in[0], in[1]); }, {p, y});
  EXPECT_TRUE(r4.ok) << r4.message;
}

// ---- errors ----

TEST(LossErrors, Messages) {
  Tensor x = ones({4, 5});
  Tensor t = tensor<int64_t>({0, 1, 7, 2}, {4});
  EXPECT_KILN_ERROR(cross_entropy(x, t),
                    "[cross_entropy] target 7 at flat position 2 is out of range for 5 classes (expected [0, 5) or ignore_index -100)");
  EXPECT_KILN_ERROR(cross_entropy(x, tensor<int64_t>({0, -1, 0, 0}, {4})), "target -1 at flat position 1 is out of range");
  EXPECT_KILN_ERROR(cross_entropy(x, tensor<int64_t>({0, -100, 0, 0}, {4}), {.ignore_index = 3}),
                    "target -100 at flat position 1 is out of range for 5 classes");
  EXPECT_KILN_ERROR(cross_entropy(x, ones({4})), "[cross_entropy] targets must be class indices of dtype i32 or i64, got f32 [4]");
  EXPECT_KILN_ERROR(cross_entropy(x, zeros({5}, {.dtype = kI64})),
                    "[cross_entropy] targets of shape [5] do not match logits [4, 5] without class dim 1 (expected [4])");
  EXPECT_KILN_ERROR(cross_entropy(x, zeros({4}, {.dtype = kI64}), {.class_dim = 0}), "targets of shape [4] do not match logits [4, 5] without class dim 0 (expected [5])");
  EXPECT_KILN_ERROR(cross_entropy(x, zeros({4}, {.dtype = kI64}), {.class_dim = 2}), "[cross_entropy] dim 2 out of range");
  EXPECT_KILN_ERROR(cross_entropy(ones({4, 5}, {.dtype = kI32}), zeros({4}, {.dtype = kI64})), "[cross_entropy] expects floating logits");
  EXPECT_KILN_ERROR(cross_entropy(x, zeros({4}, {.dtype = kI64}), {.label_smoothing = 1.5}), "label_smoothing must be in [0, 1], got 1.5");
  EXPECT_KILN_ERROR(masked_cross_entropy(x, zeros({4}, {.dtype = kI64}), ones({3})), "[masked_cross_entropy] mask of shape [3] does not match targets [4]");
  EXPECT_KILN_ERROR(masked_cross_entropy(x, zeros({4}, {.dtype = kI64}), zeros({4}, {.dtype = kI64})), "[masked_cross_entropy] mask must be bool or floating, got i64");
  EXPECT_KILN_ERROR(cross_entropy(zeros({4, 0}), zeros({4}, {.dtype = kI64})), "have no classes");

  EXPECT_KILN_ERROR(mse_loss(ones({3, 4}), ones({4})), "[mse_loss] input [3, 4] and target [4] must have the same shape");
  EXPECT_KILN_ERROR(l1_loss(ones({3}), ones({3}, {.dtype = kF64})), "[l1_loss] target has dtype f64 but input has dtype f32");
  EXPECT_KILN_ERROR(smooth_l1_loss(ones({3}), ones({3}), Reduction::Mean, -1.0), "[smooth_l1_loss] beta must be finite and >= 0, got -1");
  EXPECT_KILN_ERROR(smooth_l1_loss(ones({3}, {.dtype = kI64}), ones({3}, {.dtype = kI64})), "[smooth_l1_loss] expects a floating input");
  EXPECT_KILN_ERROR(binary_cross_entropy(full({2}, 1.5f), ones({2})),
                    "[binary_cross_entropy] input values must be probabilities in [0, 1] (input [2])");
  EXPECT_KILN_ERROR(binary_cross_entropy(ones({2, 3}), ones({2, 3}), ones({2})),
                    "[binary_cross_entropy] weight of shape [2] does not broadcast to input [2, 3]");
  EXPECT_KILN_ERROR(binary_cross_entropy_with_logits(ones({2, 3}), ones({2, 3}), {}, ones({4})),
                    "[binary_cross_entropy_with_logits] pos_weight of shape [4] does not broadcast to input [2, 3]");
  EXPECT_KILN_ERROR(binary_cross_entropy_with_logits(ones({2, 3}), ones({3})),
                    "[binary_cross_entropy_with_logits] input [2, 3] and target [3] must have the same shape");
  EXPECT_KILN_ERROR(mse_loss(Tensor(), ones({3})), "[mse_loss] input is an undefined tensor");
  EXPECT_KILN_ERROR(mse_loss(ones({3}), Tensor()), "[mse_loss] target is an undefined tensor");
  EXPECT_KILN_ERROR(binary_cross_entropy_with_logits(ones({2, 3}), ones({2, 3}), ones({3}, {.dtype = kF64})),
                    "[binary_cross_entropy_with_logits] weight has dtype f64 but input has dtype f32");
  EXPECT_KILN_ERROR(cross_entropy(Tensor(), zeros({4}, {.dtype = kI64})), "[cross_entropy] logits is an undefined tensor");
  EXPECT_KILN_ERROR(cross_entropy(x, Tensor()), "[cross_entropy] targets is an undefined tensor");
  EXPECT_KILN_ERROR(cross_entropy(full({}, 1.0f), zeros({}, {.dtype = kI64})), "[cross_entropy] logits must have a class dim, got a scalar");
  EXPECT_KILN_ERROR(masked_cross_entropy(x, zeros({4}, {.dtype = kI64}), Tensor()), "[masked_cross_entropy] mask is an undefined tensor");
  Tensor z = zeros({4}, {.dtype = kI64});
  EXPECT_KILN_ERROR(cross_entropy(x, z, {.weight = ones({4})}), "[cross_entropy] weight of shape [4] does not match the 5 classes of logits [4, 5]");
  EXPECT_KILN_ERROR(cross_entropy(x, z, {.weight = ones({5}, {.dtype = kF64})}), "[cross_entropy] weight has dtype f64 but logits have dtype f32");
  EXPECT_KILN_ERROR(cross_entropy(x, z, {.label_smoothing = 0.1, .weight = ones({5})}),
                    "[cross_entropy] weight together with label_smoothing is not supported");
  EXPECT_KILN_ERROR(cross_entropy(x, z, {.weight = ones({5}, {.requires_grad = true})}), "[cross_entropy] no gradient flows to weight");
}

}  // namespace
}  // namespace kiln
