// Tests of linear_gelu (kiln/ops/linear_gelu.h): the fused kernels (both ISA
// copies) against backend::cpu::ref in f32, f64 and bf16, in place and with
// row counts that are not whole blocks, and independent of the thread count;
// the op against gelu(linear(...)) composed of kiln ops (values and the three
// gradients; f64, f32, bf16; 3-D and 1-D inputs, without bias); gradchecks in
// f64, first and second order; the errors. Legend: R rows, I in_features, O
// out_features.
#include "kiln/ops/linear_gelu.h"

#include "kiln/ops/linalg.h"
#include "src/backend/cpu/elementwise/gelu_fused.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;
namespace cpu = backend::cpu;

DType compute_of(DType t) { return t == kF64 ? kF64 : kF32; }

TEST(LinearGeluKernels, MatchRef) {
  for_each_kernel_isa([&](KernelIsa) {
    for (DType t : {kF32, kF64, kBF16})
      for (int64_t R : {1, 31, 32, 77}) {
        SCOPED_TRACE(fmt::format("{} R {}", name(t), R));
        const int64_t O = 37;
        // u spans GELU's regimes: the tails (|u| up to 12) and the middle.
        Tensor u = to(mul(randn_seeded({R, O}, uint64_t(R), kF64), 4.0), t);
        Tensor y1 = empty({R, O}, {.dtype = t}), y2 = empty({R, O}, {.dtype = t});
        Tensor d1 = empty({R, O}, {.dtype = compute_of(t)}), d2 = empty({R, O}, {.dtype = compute_of(t)});
        cpu::gelu_tanh_with_grad(u, y1, d1);
        cpu::ref::gelu_tanh_with_grad(u, y2, d2);
        const double tol = t == kF64 ? 1e-13 : t == kF32 ? 2e-6 : 1e-2;
        EXPECT_TRUE(all_close(to(y1, kF64), to(y2, kF64), tol, tol)) << "y";
        EXPECT_TRUE(all_close(to(d1, kF64), to(d2, kF64), t == kF64 ? 1e-13 : 2e-6, t == kF64 ? 1e-13 : 2e-6))
            << "d";
        // In place (y over u) gives the same values; without d only y.
        Tensor u3 = u.clone(), y4 = empty({R, O}, {.dtype = t});
        cpu::gelu_tanh_with_grad(u3, u3, Tensor());
        cpu::gelu_tanh_with_grad(u, y4, Tensor());
        EXPECT_TRUE(testing::equal(u3, y1)) << "in place";
        EXPECT_TRUE(testing::equal(y4, y1)) << "without d";
        // The backward: gu = g d and the bias gradient (sum over rows).
        Tensor g = randn_seeded({R, O}, uint64_t(100 + R), t);
        Tensor gu1 = empty({R, O}, {.dtype = t}), gu2 = empty({R, O}, {.dtype = t});
        Tensor gb1 = empty({O}, {.dtype = t}), gb2 = empty({O}, {.dtype = t});
        cpu::gelu_grad_bias(g, d2, gu1, gb1);
        cpu::ref::gelu_grad_bias(g, d2, gu2, gb2);
        EXPECT_TRUE(all_close(to(gu1, kF64), to(gu2, kF64), tol, tol)) << "gu";
        const double btol = t == kF64 ? 1e-12 : t == kF32 ? 1e-5 : 5e-2;
        EXPECT_TRUE(all_close(to(gb1, kF64), to(gb2, kF64), btol, btol)) << "gb";
        Tensor gu3 = empty({R, O}, {.dtype = t});
        cpu::gelu_grad_bias(g, d2, gu3, Tensor());
        EXPECT_TRUE(testing::equal(gu3, gu1)) << "gu without gb";
      }
  });
}

TEST(LinearGeluKernels, ResultsDoNotDependOnThreadCount) {
  for_each_kernel_isa([&](KernelIsa) {
    const int before = get_num_threads();
    Tensor u = to(randn_seeded({3136, 64}, 1), kF32), g = to(randn_seeded({3136, 64}, 2), kF32);
    std::vector<Tensor> results[2];
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      Tensor y = empty({3136, 64}), d = empty({3136, 64}), gu = empty({3136, 64}), gb = empty({64});
      cpu::gelu_tanh_with_grad(u, y, d);
      cpu::gelu_grad_bias(g, d, gu, gb);
      results[threads - 1] = {y, d, gu, gb};
    }
    set_num_threads(before);
    for (size_t i = 0; i < results[0].size(); ++i) EXPECT_TRUE(testing::equal(results[0][i], results[1][i])) << i;
  });
}

// Values and gradients of linear_gelu against gelu(linear()) on leaves.
void expect_matches(const Shape& xs, int64_t O, bool with_bias, DType t, double tol) {
  const int64_t I = xs[xs.size() - 1];
  Tensor x = randn_seeded(xs, 1, t), w = to(mul(randn_seeded({O, I}, 2), 0.5), t), b = randn_seeded({O}, 3, t);
  Shape os = xs;
  os[os.size() - 1] = O;
  Tensor g = randn_seeded(os, 4, t);
  Tensor got[4], want[4];
  for (int which = 0; which < 2; ++which) {
    Tensor xl = leaf_of(x), wl = leaf_of(w), bl = with_bias ? leaf_of(b) : Tensor();
    Tensor out = which ? gelu(linear(xl, wl, bl), GeluApproximation::tanh)
                       : linear_gelu(xl, wl, bl, GeluApproximation::tanh);
    out.backward(g);
    Tensor* r = which ? want : got;
    r[0] = out.detach();
    r[1] = xl.grad();
    r[2] = wl.grad();
    r[3] = with_bias ? bl.grad() : Tensor();
  }
  EXPECT_TRUE(all_close(to(got[0], kF64), to(want[0], kF64), tol, tol)) << "out";
  EXPECT_TRUE(all_close(to(got[1], kF64), to(want[1], kF64), tol, tol)) << "dx";
  EXPECT_TRUE(all_close(to(got[2], kF64), to(want[2], kF64), tol, tol)) << "dw";
  if (with_bias) {
    EXPECT_TRUE(all_close(to(got[3], kF64), to(want[3], kF64), tol, tol)) << "db";
  }
}

TEST(LinearGelu, MatchesComposedOps) {
  for (bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "bias" : "no bias");
    expect_matches({3, 7, 20}, 45, bias, kF64, 1e-12);
    expect_matches({3, 7, 20}, 45, bias, kF32, 2e-5);
    expect_matches({20}, 9, bias, kF64, 1e-12);
    expect_matches({2, 49, 32}, 128, bias, kBF16, 5e-2);
  }
  // The exact GELU is the two ops.
  Tensor x = randn_seeded({4, 6}, 5), w = randn_seeded({3, 6}, 6);
  EXPECT_TRUE(testing::equal(linear_gelu(x, w, {}, GeluApproximation::none), gelu(linear(x, w), GeluApproximation::none)));
}

TEST(LinearGelu, GradcheckFirstAndSecondOrder) {
  auto fn = [](const std::vector<Tensor>& in) { return linear_gelu(in[0], in[1], in[2]); };
  EXPECT_GRADCHECK(fn, {leaf({2, 3, 5}, 1, -2.0, 2.0), leaf({4, 5}, 2), leaf({4}, 3)});
  EXPECT_GRADCHECK(fn, {noncontiguous(leaf({3, 5}, 4, -2.0, 2.0)), leaf({4, 5}, 5), leaf({4}, 6)});
  GradcheckResult r = gradcheck_second_order(fn, {leaf({2, 4}, 7, -2.0, 2.0), leaf({3, 4}, 8), leaf({3}, 9)});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(LinearGelu, NoGradAndErrors) {
  Tensor x = randn_seeded({2, 3, 4}, 1), w = randn_seeded({5, 4}, 2), b = randn_seeded({5}, 3);
  {
    NoGradGuard no_grad;
    EXPECT_TRUE(all_close(linear_gelu(leaf_of(x), w, b), gelu(linear(x, w, b), GeluApproximation::tanh), 1e-13, 1e-13));
  }
  EXPECT_KILN_ERROR(linear_gelu(x, randn_seeded({5, 3}, 4), b), "[linear_gelu] input [2, 3, 4] does not match weight [5, 3]");
  EXPECT_KILN_ERROR(linear_gelu(x, randn_seeded({5}, 4), b), "weight [5] must be 2-D");
  EXPECT_KILN_ERROR(linear_gelu(x, w, randn_seeded({4}, 5)), "bias [4] f64 must be [out_features = 5]");
  EXPECT_KILN_ERROR(linear_gelu(to(x, kF32), w, b), "must share one floating dtype");
  EXPECT_KILN_ERROR(linear_gelu(Tensor(), w, b), "input is an undefined tensor");
}

}  // namespace
}  // namespace kiln
