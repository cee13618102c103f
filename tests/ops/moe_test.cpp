// The MoE primitives (kiln/ops/moe.h): moe_group against its stable-sort
// reference, grouped_linear against per-expert linear() and the plain
// reference kernel, its gradients by gradcheck, and the errors.
#include "kiln/ops/moe.h"
#include "kiln/ops/moe_combine.h"

#include <gtest/gtest.h>

#include "src/backend/cpu/moe/moe.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {
using namespace testing;

Tensor rand_f(const Shape& s, uint64_t seed, DType dt = kF32) {
  Generator g(seed);
  return randn(s, g, {.dtype = dt});
}

TEST(MoEGroup, StableCountingSortMatchesReference) {
  Generator g(3);
  const Tensor ex = randint(0, 5, {97}, g, {.dtype = kI64});
  const MoEGroups got = moe_group(ex, 6);  // expert 5 gets nothing
  Tensor order = Tensor::empty({97}, kI64), counts = Tensor::empty({6}, kI64);
  backend::cpu::ref::moe_group(ex, 6, order, counts);
  EXPECT_EQ(got.order.to_vector<int64_t>(), order.to_vector<int64_t>());
  EXPECT_EQ(got.counts, counts.to_vector<int64_t>());
  EXPECT_EQ(got.counts[5], 0);
  // Sorted by expert, ties in ascending assignment id.
  const auto o = got.order.to_vector<int64_t>();
  const auto e = ex.to_vector<int64_t>();
  for (size_t p = 1; p < o.size(); ++p) {
    EXPECT_TRUE(e[size_t(o[p - 1])] < e[size_t(o[p])] || (e[size_t(o[p - 1])] == e[size_t(o[p])] && o[p - 1] < o[p]));
  }
}

TEST(GroupedLinear, MatchesPerExpertLinearAndReference) {
  const std::vector<int64_t> sizes{5, 0, 9, 2};
  const Tensor x = rand_f({16, 7}, 1), w = rand_f({4, 3, 7}, 2);
  const Tensor y = grouped_linear(x, w, sizes);
  ASSERT_EQ(y.shape(), (Shape{16, 3}));
  int64_t r = 0;
  for (size_t e = 0; e < sizes.size(); ++e) {
    if (sizes[e] == 0) continue;
    const Tensor want = linear(narrow(x, 0, r, sizes[e]), select(w, 0, int64_t(e)));
    EXPECT_TRUE(allclose(narrow(y, 0, r, sizes[e]), want, 1e-6, 1e-6)) << e;
    r += sizes[e];
  }
  Tensor ref_out = Tensor::empty({16, 3}, kF32);
  backend::cpu::ref::grouped_matmul(x, w, sizes, ref_out, true);
  EXPECT_TRUE(allclose(y, ref_out, 1e-5, 1e-6));
  Tensor g = rand_f({16, 3}, 4), dw = Tensor::empty({4, 3, 7}, kF32), dw_ref = Tensor::empty({4, 3, 7}, kF32);
  backend::cpu::grouped_matmul_weight_grad(g, x, sizes, dw);
  backend::cpu::ref::grouped_matmul_weight_grad(g, x, sizes, dw_ref);
  EXPECT_TRUE(allclose(dw, dw_ref, 1e-5, 1e-6));
  EXPECT_EQ(sum(abs(select(dw, 0, 1))).item<float>(), 0.f);  // an empty run: zero gradient
}

// The f32 grouped GEMM kernels (isa/grouped_gemm.cpp), both ISA copies,
// against the references: tiles cut at every edge (rows not a multiple of
// the register tile, columns not a multiple of the panel, odd inner dims),
// empty runs, one expert taking every row, and the fused gather / scatter.
struct GroupedCase {
  std::vector<int64_t> sizes;
  int64_t K, N;
};

TEST(GroupedGemmKernels, MatchReferenceOnBothIsas) {
  const std::vector<GroupedCase> cases{{{5, 0, 9, 2}, 7, 3},      {{61, 50, 0, 70}, 128, 256},
                                       {{0, 200, 0}, 33, 47},     {{13}, 1, 65},
                                       {{17, 1, 40, 9, 8}, 96, 31}, {{0, 0}, 16, 16}};
  for_each_kernel_isa([&](KernelIsa) {
    uint64_t seed = 10;
    for (const GroupedCase& c : cases) {
      SCOPED_TRACE("K " + std::to_string(c.K) + " N " + std::to_string(c.N));
      const int64_t E = int64_t(c.sizes.size());
      int64_t M = 0;
      for (int64_t s : c.sizes) M += s;
      const int64_t T = M / 2 + 3;  // the gather's source rows (a token appears several times)
      Generator gen(seed++);
      const Tensor src = rand_f({T, c.K}, seed++);
      const Tensor gather = M > 0 ? randint(0, T, {M}, gen, {.dtype = kI64}) : Tensor::empty({0}, kI64);
      const Tensor scatter = M > 0 ? randperm(M, gen) : Tensor::empty({0}, kI64);
      const Tensor a = rand_f({M, c.K}, seed++);
      for (bool trans_b : {true, false}) {
        const Tensor b = trans_b ? rand_f({E, c.N, c.K}, seed++) : rand_f({E, c.K, c.N}, seed++);
        for (int rows = 0; rows < 3; ++rows) {  // plain, gather, gather + scatter
          SCOPED_TRACE("trans_b " + std::to_string(trans_b) + " rows " + std::to_string(rows));
          const Tensor& in = rows == 0 ? a : src;
          const Tensor ar = rows == 0 ? Tensor() : gather, orows = rows == 2 ? scatter : Tensor();
          Tensor got = zeros({M, c.N}), want = zeros({M, c.N});
          backend::cpu::grouped_matmul(in, b, c.sizes, got, trans_b, ar, orows);
          backend::cpu::ref::grouped_matmul(in, b, c.sizes, want, trans_b, ar, orows);
          EXPECT_TRUE(allclose(got, want, 1e-5, 1e-5));
        }
      }
      const Tensor dy = rand_f({M, c.N}, seed++);
      for (int rows = 0; rows < 3; ++rows) {  // plain, x gathered, dy gathered too
        SCOPED_TRACE("weight grad rows " + std::to_string(rows));
        const Tensor& x = rows == 0 ? a : src;
        const Tensor xr = rows == 0 ? Tensor() : gather, dyr = rows == 2 ? scatter : Tensor();
        Tensor got = full({E, c.N, c.K}, 7.0), want = Tensor::empty({E, c.N, c.K}, kF32);
        backend::cpu::grouped_matmul_weight_grad(dy, x, c.sizes, got, dyr, xr);
        backend::cpu::ref::grouped_matmul_weight_grad(dy, x, c.sizes, want, dyr, xr);
        EXPECT_TRUE(allclose(got, want, 1e-5, 1e-5));
      }
    }
  });
}

TEST(GroupedGemmKernels, ResultsDoNotDependOnThreadCount) {
  for_each_kernel_isa([&](KernelIsa) {
    const int before = get_num_threads();
    const std::vector<int64_t> sizes{300, 7, 0, 229};
    const Tensor x = rand_f({536, 96}, 1), w = rand_f({4, 80, 96}, 2), g = rand_f({536, 80}, 3);
    std::vector<Tensor> results[3];
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      Tensor y = Tensor::empty({536, 80}, kF32), dx = Tensor::empty({536, 96}, kF32),
             dw = Tensor::empty({4, 80, 96}, kF32);
      backend::cpu::grouped_matmul(x, w, sizes, y, true);
      backend::cpu::grouped_matmul(g, w, sizes, dx, false);
      backend::cpu::grouped_matmul_weight_grad(g, x, sizes, dw);
      results[threads - 1] = {y, dx, dw};
    }
    set_num_threads(before);
    for (size_t i = 0; i < 3; ++i)
      for (int t : {1, 2}) EXPECT_TRUE(testing::equal(results[0][i], results[t][i])) << i << " threads " << t + 1;
  });
}

TEST(GroupedLinear, Gradcheck) {
  const std::vector<int64_t> sizes{2, 0, 3};
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return grouped_linear(in[0], in[1], sizes); },
                   {leaf({5, 4}, 1), leaf({3, 2, 4}, 2)});
}

// The fused gather / scatter form against the ops it replaces, and its
// gradients (a token taken twice sums both rows' gradients).
TEST(GroupedLinear, FusedGatherScatterMatchesIndexSelects) {
  const std::vector<int64_t> sizes{4, 0, 3, 5};
  const Tensor x = rand_f({7, 6}, 1), w = rand_f({4, 5, 6}, 2);
  const Tensor gather = tensor<int64_t>({3, 0, 6, 6, 1, 2, 5, 0, 4, 3, 1, 2});
  const Tensor scatter = tensor<int64_t>({11, 2, 7, 0, 5, 9, 1, 3, 10, 4, 8, 6});
  for (int mode = 0; mode < 3; ++mode) {  // gather, scatter (on 12 rows), both
    SCOPED_TRACE(mode);
    const Tensor in = mode == 1 ? rand_f({12, 6}, 3) : x;
    const Tensor gr = mode == 1 ? Tensor() : gather, sr = mode == 0 ? Tensor() : scatter;
    Tensor want = grouped_linear(gr.defined() ? index_select(in, 0, gr) : in, w, sizes);
    if (sr.defined()) want = index_select(want, 0, argsort(sr, 0));
    EXPECT_TRUE(allclose(grouped_linear(in, w, sizes, gr, sr), want, 1e-5, 1e-6));
    EXPECT_GRADCHECK([&](const std::vector<Tensor>& v) { return grouped_linear(v[0], v[1], sizes, gr, sr); },
                     {leaf(in.shape(), 4), leaf({4, 5, 6}, 5)});
  }
}

// moe_combine against the ops it replaces (f32, bf16), its gradients (f64),
// and its errors.
TEST(MoECombine, MatchesMulSumAndGradchecks) {
  for (DType dt : {kF32, kBF16}) {
    const Tensor y = rand_f({10, 37}, 1, dt), w = rand_f({5, 2}, 2, dt);
    const Tensor want = sum(mul(reshape(y, {5, 2, 37}), unsqueeze(w, 2)), {1});
    EXPECT_TRUE(allclose(moe_combine(y, w).to(kF32), want.to(kF32), dt == kF32 ? 1e-6 : 2e-2, 1e-5)) << name(dt);
  }
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& v) { return moe_combine(v[0], v[1]); },
                   {leaf({12, 7}, 3), leaf({4, 3}, 4)});
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& v) { return moe_combine(v[0], v[1]); },
                   {leaf({5, 9}, 5), leaf({5, 1}, 6)});
  EXPECT_KILN_ERROR(moe_combine(rand_f({9, 4}, 1), rand_f({5, 2}, 2)),
                    "[moe_combine] y [9, 4] must be [N k = 10, D] for weights [5, 2]");
  EXPECT_KILN_ERROR(moe_combine(rand_f({10, 4}, 1), rand_f({10}, 2)), "[moe_combine] weights [10] must be 2-D");
  EXPECT_KILN_ERROR(moe_combine(rand_f({10, 4}, 1), rand_f({5, 2}, 2, kF64)), "must share one floating dtype");
}

// grouped_linear_gelu (the GELU in the grouped GEMM's epilogue, its
// derivative kept for the backward) is bit for bit gelu(grouped_linear(...))
// on f32, values and both gradients, on both kernel ISAs: tiles cut at every
// edge, empty runs, the fused gather / scatter, pre-activations out to the
// GELU's tails (|x| > 10, where Phi is 0 or 1 and the exponential clamps).
// Other dtypes run the composition; f64 gradchecks through it.
TEST(GroupedLinearGelu, BitwiseTheComposition) {
  struct Case {
    std::vector<int64_t> sizes;
    int64_t K, N;
    double scale;  // of the weights: the spread of the pre-activations
  };
  const std::vector<Case> cases{{{61, 50, 0, 70}, 128, 256, 0.1}, {{17, 1, 40, 9, 8}, 96, 31, 1.0},
                                {{5, 0, 9, 2}, 7, 3, 4.0},          {{0, 200, 0}, 33, 47, 0.3}};
  for_each_kernel_isa([&](KernelIsa) {
    uint64_t seed = 40;
    for (const Case& c : cases) {
      SCOPED_TRACE("K " + std::to_string(c.K) + " N " + std::to_string(c.N));
      const int64_t E = int64_t(c.sizes.size());
      int64_t M = 0;
      for (int64_t s : c.sizes) M += s;
      const int64_t T = M / 2 + 3;
      Generator gen(seed++);
      const Tensor gather = randint(0, T, {M}, gen, {.dtype = kI64});
      const Tensor scatter = randperm(M, gen);
      const Tensor w0 = mul(rand_f({E, c.N, c.K}, seed++), c.scale);
      const Tensor g = rand_f({M, c.N}, seed++);
      for (int rows = 0; rows < 3; ++rows) {  // plain, gather, gather + scatter
        SCOPED_TRACE("rows " + std::to_string(rows));
        const Tensor x0 = rand_f({rows == 0 ? M : T, c.K}, seed++);
        const Tensor gr = rows == 0 ? Tensor() : gather, sr = rows == 2 ? scatter : Tensor();
        Tensor got_dx, got_dw, want_dx, want_dw, got, want;
        for (bool fused : {true, false}) {
          Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_();
          Tensor y = fused ? grouped_linear_gelu(x, w, c.sizes, gr, sr) : gelu(grouped_linear(x, w, c.sizes, gr, sr));
          backward({y}, {g});
          (fused ? got : want) = y.detach();
          (fused ? got_dx : want_dx) = x.grad();
          (fused ? got_dw : want_dw) = w.grad();
        }
        EXPECT_TRUE(testing::equal(got, want));
        EXPECT_TRUE(testing::equal(got_dx, want_dx));
        EXPECT_TRUE(testing::equal(got_dw, want_dw));
        {
          NoGradGuard no_grad;  // inference: the GELU alone, no derivative
          EXPECT_TRUE(testing::equal(grouped_linear_gelu(x0, w0, c.sizes, gr, sr), want));
        }
      }
    }
  });
  const std::vector<int64_t> sizes{2, 0, 3};
  const Tensor xb = rand_f({5, 4}, 1, kBF16), wb = rand_f({3, 2, 4}, 2, kBF16);
  EXPECT_TRUE(testing::equal(grouped_linear_gelu(xb, wb, sizes, Tensor(), Tensor()),
                             gelu(grouped_linear(xb, wb, sizes))));
  EXPECT_GRADCHECK(
      [&](const std::vector<Tensor>& in) { return grouped_linear_gelu(in[0], in[1], sizes, Tensor(), Tensor()); },
      {leaf({5, 4}, 1), leaf({3, 2, 4}, 2)});
  EXPECT_KILN_ERROR(grouped_linear_gelu(rand_f({6, 5}, 1), rand_f({2, 3, 4}, 2), {3, 3}, Tensor(), Tensor()),
                    "[grouped_linear] input [6, 5] does not match weight [2, 3, 4] (in_features 4)");
}

TEST(GroupedLinear, BadInput) {
  {
    const Tensor x = rand_f({3, 4}, 1), w = rand_f({2, 3, 4}, 2);
    EXPECT_KILN_ERROR(grouped_linear(x, w, {2, 2}, tensor<int64_t>({0, 1, 3, 2}), Tensor()),
                      "[grouped_linear] gather [4]: entry 2 is 3, outside [0, 3)");
    EXPECT_KILN_ERROR(grouped_linear(x, w, {2, 2}, tensor<int64_t>({0, 1, 2}), Tensor()),
                      "[grouped_linear] gather [3] must be [M = 4]");
    EXPECT_KILN_ERROR(grouped_linear(x, w, {2, 2}, tensor<int64_t>({0, 1, 2, 2}), tensor<int64_t>({0, 1, 1, 3})),
                      "[grouped_linear] scatter [4] must be a permutation of [0, 4), but 1 appears twice");
    EXPECT_KILN_ERROR(grouped_linear(x, w, {2, 1}, Tensor(), tensor<int64_t>({0, 3, 2})),
                      "[grouped_linear] scatter [3]: entry 1 is 3, outside [0, 3)");
  }
  const Tensor x = rand_f({6, 4}, 1), w = rand_f({2, 3, 4}, 2);
  EXPECT_KILN_ERROR(grouped_linear(x, w, {3, 2}), "[grouped_linear] group_sizes [3, 2] add up to 5, but input [6, 4] has 6 rows");
  EXPECT_KILN_ERROR(grouped_linear(x, w, {6}), "[grouped_linear] group_sizes [6] must have one entry per expert (2)");
  EXPECT_KILN_ERROR(grouped_linear(x, w, {7, -1}), "[grouped_linear] group_sizes [7, -1] has a negative entry");
  EXPECT_KILN_ERROR(grouped_linear(rand_f({6, 5}, 1), w, {3, 3}),
                    "[grouped_linear] input [6, 5] does not match weight [2, 3, 4] (in_features 4)");
  EXPECT_KILN_ERROR(grouped_linear(x, rand_f({3, 4}, 2), {3, 3}), "[grouped_linear] weight [3, 4] must be 3-D");
  EXPECT_KILN_ERROR(moe_group(tensor<int64_t>({0, 3}), 3), "[moe_group] experts [2]: entry 1 is 3, outside [0, 3)");
}

}  // namespace
}  // namespace kiln
