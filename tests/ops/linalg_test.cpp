// Tests of kiln/ops/linalg.h: PyTorch goldens, oneDNN against the reference
// triple loop over shapes, layouts, batch broadcasting and dtypes, gradchecks
// in f64, the primitive cache and thread count, and error messages.
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <functional>

#include "src/backend/cpu/linalg/matmul.h"
#include "tests/support/ops_devices.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

// Random values of `dtype` (integers in [-4, 4]; floats standard normal).
Tensor random(const Shape& shape, uint64_t seed, DType dtype = kF32) {
  Generator gen(seed);
  if (!is_floating(dtype)) return to(randint(-4, 5, shape, gen), dtype);
  return to(randn(shape, gen), dtype);
}

// How the matrix dims of an operand are laid out in memory.
enum class Layout { contiguous, transposed, strided, padded, batch_permuted };
const char* layout_name(Layout l) {
  switch (l) {
    case Layout::contiguous: return "contiguous";
    case Layout::transposed: return "transposed";
    case Layout::strided: return "strided";
    case Layout::padded: return "padded";
    case Layout::batch_permuted: return "batch_permuted";
  }
  return "?";
}

// The values of src in layout l (a view into a larger or reordered buffer).
Tensor in_layout(const Tensor& src, Layout l) {
  NoGradGuard g;
  Shape s = src.shape();
  size_t last = s.size() - 1;
  switch (l) {
    case Layout::contiguous: return src.contiguous();
    case Layout::transposed: return contiguous(src.transpose(-1, -2)).transpose(-1, -2);
    case Layout::strided: {  // every other column: no dim has stride 1
      s[last] *= 2;
      Tensor v = zeros(s, {.dtype = src.dtype()}).slice(-1, 0, s[last], 2);
      copy_(v, src);
      return v;
    }
    case Layout::padded: {  // rows longer than the matrix (a leading dimension > cols)
      s[last] += 3;
      Tensor v = zeros(s, {.dtype = src.dtype()}).narrow(-1, 0, src.shape()[last]);
      copy_(v, src);
      return v;
    }
    case Layout::batch_permuted: {  // [B, R, C] stored as [R, B, C]
      if (src.dim() < 3) return src.contiguous();
      return contiguous(src.transpose(0, -2)).transpose(0, -2);
    }
  }
  return src;
}

// out shape of a @ b for >= 2-D operands.
Shape product_shape(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out = Shape::filled(n, 1);
  for (size_t i = 0; i + 2 < n; ++i) {
    int64_t ia = int64_t(i) - int64_t(n - a.size()), ib = int64_t(i) - int64_t(n - b.size());
    int64_t sa = ia >= 0 ? a[size_t(ia)] : 1, sb = ib >= 0 ? b[size_t(ib)] : 1;
    out[i] = sa == 1 ? sb : sa;
  }
  out[n - 2] = a[a.size() - 2];
  out[n - 1] = b[b.size() - 1];
  return out;
}

// Tolerances of fast vs reference for `dtype` and inner size K.
::testing::AssertionResult close_for(DType dtype, const Tensor& got, const Tensor& want, int64_t K) {
  switch (dtype) {
    case DType::f32: return all_close(got, want, 1e-4, 1e-5 * double(K + 1));
    case DType::bf16: return all_close(got, want, 1e-2, 1e-2);
    case DType::f64: return all_close(got, want, 1e-12, 1e-12 * double(K + 1));
    default: return testing::equal(got, want);
  }
}

// ---------------------------------------------------------------------------
// Goldens (values on a 1/8 grid, so the expected results are exact in f32)
// ---------------------------------------------------------------------------

Tensor run_case(const std::string& name, const std::vector<Tensor>& in) {
  if (name == "mm") return mm(in[0], in[1]);
  if (name.rfind("matmul", 0) == 0) return matmul(in[0], in[1]);
  if (name == "bmm") return bmm(in[0], in[1]);
  if (name.rfind("linear", 0) == 0) return in.size() == 3 ? linear(in[0], in[1], in[2]) : linear(in[0], in[1]);
  if (name == "addmm_row") return addmm(in[0], in[1], in[2]);
  if (name == "addmm_scaled") return addmm(in[0], in[1], in[2], 0.5, 2.0);
  if (name == "outer") return outer(in[0], in[1]);
  if (name == "dot") return dot(in[0], in[1]);
  ADD_FAILURE() << "unknown golden case " << name;
  return {};
}

TEST(LinalgGolden, ForwardMatchesTorch) {
  const auto& cases = golden("linalg").at("cases");
  ASSERT_GE(cases.size(), 17u);
  for_each_device([&](Device d) {
  for (const auto& c : cases) {
    std::string name = c.at("name").get<std::string>();
    std::vector<Tensor> in, in_nc;
    for (const auto& j : c.at("inputs")) {
      in.push_back(to(golden_tensor(j), d));
      in_nc.push_back(noncontiguous(in.back()));
    }
    Tensor want = golden_tensor(c.at("out"));
    EXPECT_TRUE(all_close(to(run_case(name, in), kCPU), want, 1e-6, 1e-6)) << name;
    EXPECT_TRUE(all_close(to(run_case(name, in_nc), kCPU), want, 1e-6, 1e-6)) << name << " (non-contiguous inputs)";
    // The same in f64 (plain kernel) and bf16 (oneDNN bf16; grid values are exact in bf16).
    std::vector<Tensor> in64, in16;
    for (const Tensor& t : in) {
      in64.push_back(to(t, kF64));
      in16.push_back(to(t, kBF16));
    }
    Tensor got64 = run_case(name, in64);
    EXPECT_EQ(got64.dtype(), kF64) << name;
    EXPECT_EQ(got64.device(), d) << name;
    EXPECT_TRUE(all_close(to(got64, kCPU), want, 1e-12, 1e-12)) << name << " (f64)";
    EXPECT_TRUE(all_close(to(run_case(name, in16), kCPU), want, 1e-2, 1e-2)) << name << " (bf16)";
  }
  });
}

TEST(LinalgGolden, LinearGradientsMatchTorch) {
  const auto& j = golden("linalg_linear_grads");
  Tensor x = golden_tensor(j.at("x")), w = golden_tensor(j.at("w")), b = golden_tensor(j.at("b"));
  Tensor c = golden_tensor(j.at("c"));
  for (bool nc : {false, true}) {
    Tensor xl = nc ? noncontiguous(x) : x.clone(), wl = nc ? noncontiguous(w) : w.clone(), bl = b.clone();
    xl.requires_grad_();
    wl.requires_grad_();
    bl.requires_grad_();
    sum(mul(linear(xl, wl, bl), c)).backward();
    EXPECT_TRUE(all_close(xl.grad(), golden_tensor(j.at("gx")), 1e-5, 1e-5));
    EXPECT_TRUE(all_close(wl.grad(), golden_tensor(j.at("gw")), 1e-5, 1e-5));
    EXPECT_TRUE(all_close(bl.grad(), golden_tensor(j.at("gb")), 1e-5, 1e-5));
  }
}

// ---------------------------------------------------------------------------
// Fast kernels against the reference
// ---------------------------------------------------------------------------

struct Dims {
  Shape a, b;  // operand shapes, >= 2-D
};

const std::vector<Dims>& kernel_shapes() {
  static const std::vector<Dims> shapes = {
      {{1, 1}, {1, 1}},           {{1, 7}, {7, 1}},             {{3, 5}, {5, 7}},
      {{17, 33}, {33, 9}},        {{64, 64}, {64, 64}},         {{1, 128}, {128, 300}},
      {{200, 3}, {3, 1}},         {{130, 70}, {70, 260}},       {{4, 3, 5}, {4, 5, 2}},
      {{4, 3, 5}, {5, 6}},        {{3, 5}, {4, 5, 6}},          {{2, 1, 3, 4}, {5, 4, 2}},
      {{2, 3, 1, 8}, {3, 8, 5}},  {{6, 1, 16}, {16, 9}},        {{2, 2, 2, 3, 4}, {2, 1, 2, 4, 3}},
      {{5, 1, 7}, {1, 7, 1}},
  };
  return shapes;
}

TEST(LinalgKernel, FastMatchesReferenceOverShapesLayoutsAndDtypes) {
  const Layout layouts[] = {Layout::contiguous, Layout::transposed, Layout::strided, Layout::padded,
                            Layout::batch_permuted};
  uint64_t seed = 100;
  int checked = 0;
  for (DType dt : {kF32, kBF16, kF64, kI64, kI32, kU8}) {
    for (const Dims& d : kernel_shapes()) {
      Tensor a0 = random(d.a, ++seed, dt), b0 = random(d.b, ++seed, dt);
      Shape os = product_shape(d.a, d.b);
      Tensor want = zeros(os, {.dtype = dt});
      backend::cpu::ref::matmul(a0, b0, want);
      for (Layout la : layouts) {
        for (Layout lb : layouts) {
          if (dt != kF32 && la != lb) continue;  // every pairing in f32, matching layouts elsewhere
          Tensor a = in_layout(a0, la), b = in_layout(b0, lb);
          Tensor got = full(os, 7, {.dtype = dt});  // beta == 0 must ignore old values
          backend::cpu::matmul(a, b, got);
          EXPECT_TRUE(close_for(dt, got, want, d.a[d.a.size() - 1]))
              << name(dt) << " a " << to_string(d.a) << " (" << layout_name(la) << ") b " << to_string(d.b) << " ("
              << layout_name(lb) << ")";
          if (dt == kF32 || dt == kBF16) {
            EXPECT_NE(backend::cpu::last_matmul_impl().rfind("ref", 0), 0u) << "oneDNN fell back to reference code";
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 500);
}

TEST(LinalgKernel, EpilogueBiasAlphaBetaMatchReference) {
  uint64_t seed = 500;
  for (DType dt : {kF32, kBF16, kF64, kI64}) {
    for (const Dims& d : {Dims{{5, 7}, {7, 9}}, Dims{{3, 4, 6}, {6, 10}}, Dims{{2, 33, 17}, {2, 17, 65}}}) {
      Shape os = product_shape(d.a, d.b);
      int64_t N = os[os.size() - 1];
      Tensor a = random(d.a, ++seed, dt), b = in_layout(random(d.b, ++seed, dt), Layout::transposed);
      Tensor bias = random({N}, ++seed, dt), init = random(os, ++seed, dt);
      Tensor strided_bias = in_layout(random({1, N}, ++seed, dt), Layout::strided).select(0, 0);
      const bool fp = is_floating(dt);
      struct Variant {
        const Tensor* bias;
        Scalar alpha, beta;
      };
      std::vector<Variant> variants = {{&bias, 1, 0}, {&strided_bias, 1, 0}, {nullptr, 1, 1}};
      if (fp) variants.push_back({nullptr, 2.5, 0.5});
      else variants.push_back({nullptr, 3, -2});
      for (const Variant& v : variants) {
        backend::cpu::MatmulEpilogue ep{v.bias, v.alpha, v.beta};
        Tensor got = init.clone(), want = init.clone();
        backend::cpu::matmul(a, b, got, ep);
        backend::cpu::ref::matmul(a, b, want, ep);
        EXPECT_TRUE(close_for(dt, got, want, d.a[d.a.size() - 1]))
            << name(dt) << " " << to_string(d.a) << " x " << to_string(d.b) << " bias " << (v.bias != nullptr)
            << " alpha " << v.alpha.to_double() << " beta " << v.beta.to_double();
      }
    }
  }
}

TEST(LinalgKernel, ExpandedOperands) {
  // Stride-0 dims from expand(): batch dims broadcast in both operands at
  // once (oneDNN rejects that layout), rows repeated, a whole matrix repeated.
  for (DType dt : {kF32, kBF16, kF64}) {
    Tensor a = random({1, 3, 5}, 1, dt).expand({4, 3, 5}), b = random({1, 5, 2}, 2, dt).expand({4, 5, 2});
    Tensor rows = random({1, 5}, 3, dt).expand({6, 5}), scalar = random({}, 4, dt).expand({5, 7});
    struct Case {
      Tensor a, b;
    };
    for (const Case& c : {Case{a, b}, Case{rows, random({5, 3}, 5, dt)}, Case{rows, scalar}, Case{a, scalar}}) {
      Tensor want = zeros(product_shape(c.a.shape(), c.b.shape()), {.dtype = dt});
      backend::cpu::ref::matmul(c.a, c.b, want);
      EXPECT_TRUE(close_for(dt, matmul(c.a, c.b), want, 5))
          << name(dt) << " " << to_string(c.a.shape()) << " x " << to_string(c.b.shape());
    }
  }
}

TEST(LinalgKernel, LargeF32AndBf16OnAllThreads) {
  // Big enough for oneDNN's blocking and both threads; odd sizes for the tails.
  Tensor a = random({2, 257, 301}, 1), b = random({301, 203}, 2);
  for (DType dt : {kF32, kBF16}) {
    Tensor ac = to(a, dt), bc = to(b, dt);
    Tensor want = zeros({2, 257, 203}, {.dtype = dt}), got = empty({2, 257, 203}, {.dtype = dt});
    backend::cpu::ref::matmul(ac, bc, want);
    backend::cpu::matmul(ac, in_layout(bc, Layout::transposed), got);
    EXPECT_TRUE(close_for(dt, got, want, 301)) << name(dt);
  }
}

TEST(LinalgKernel, TransposedOperandsAreNotCopied) {
  // a^T [64, 4096] read in place: the only allocation is the [64, 8] output.
  Tensor store = random({4096, 64}, 3), b = random({4096, 8}, 4);
  Tensor at = store.t();
  Tensor out = matmul(at, b);  // warm-up (primitive creation, caches)
  reset_peak_memory_stats();
  int64_t before = memory_stats().current_bytes;
  out = Tensor();
  out = matmul(at, b);
  int64_t extra = memory_stats().peak_bytes - before;
  EXPECT_LT(extra, store.nbytes() / 4) << "a transposed operand was copied";
  // oneDNN's implementation depends on the ISA (brgemm on AVX-512, gemm:jit on
  // AVX2); whichever it is, it must not be the reference code or kiln's plain
  // fallback, and on AVX-512 it is the brgemm kernel.
  const std::string impl = backend::cpu::last_matmul_impl();
  EXPECT_NE(impl.rfind("ref", 0), 0u) << impl;
  EXPECT_NE(impl, "plain");
  if (dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core) {  // the CPU's, or ONEDNN_MAX_CPU_ISA's cap
    EXPECT_EQ(impl.rfind("brg", 0), 0u) << impl;
  }
  Tensor want = zeros({64, 8});
  backend::cpu::ref::matmul(at, b, want);
  EXPECT_TRUE(all_close(out, want, 1e-4, 1e-3));
}

TEST(LinalgKernel, EmptyAndZeroInnerDims) {
  for (DType dt : {kF32, kF64, kBF16, kI64}) {
    // K == 0: zeros (plus bias).
    Tensor a = empty({3, 0}, {.dtype = dt}), b = empty({0, 4}, {.dtype = dt});
    EXPECT_TRUE(testing::equal(matmul(a, b), zeros({3, 4}, {.dtype = dt}))) << name(dt);
    Tensor w = empty({4, 0}, {.dtype = dt}), bias = arange(0, 4, 1, {.dtype = dt});
    EXPECT_TRUE(testing::equal(linear(a, w, bias), expand(bias, {3, 4}).contiguous())) << name(dt);
    // M == 0 / batch 0: empty results of the right shape.
    EXPECT_EQ(matmul(empty({0, 3}, {.dtype = dt}), empty({3, 5}, {.dtype = dt})).shape(), (Shape{0, 5}));
    EXPECT_EQ(matmul(empty({2, 0, 2, 3}, {.dtype = dt}), empty({3, 5}, {.dtype = dt})).shape(), (Shape{2, 0, 2, 5}));
    EXPECT_EQ(dot(empty({0}, {.dtype = dt}), empty({0}, {.dtype = dt})).item<double>(), 0.0);
  }
}

TEST(LinalgKernel, IntegerValues) {
  Tensor a = tensor<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = tensor<int64_t>({7, 8, 9, 10, 11, 12}, {3, 2});
  EXPECT_TRUE(testing::equal(matmul(a, b), tensor<int64_t>({58, 64, 139, 154}, {2, 2})));
  EXPECT_TRUE(testing::equal(addmm(tensor<int64_t>({1, -1}), a, b, 2, 3),
                             tensor<int64_t>({3 * 58 + 2, 3 * 64 - 2, 3 * 139 + 2, 3 * 154 - 2}, {2, 2})));
  Tensor a8 = tensor<uint8_t>({1, 2, 3, 4}, {2, 2});
  EXPECT_TRUE(testing::equal(mm(a8, a8), tensor<uint8_t>({7, 10, 15, 22}, {2, 2})));
}

TEST(LinalgKernel, PrimitiveCacheHitsOnRepeatedShapes) {
  // Shapes above the small-product threshold (2^15 multiply-adds), which run on oneDNN.
  Tensor a = random({67, 71}, 5), b = random({71, 73}, 6);
  matmul(a, b);
  backend::cpu::MatmulCacheStats s0 = backend::cpu::matmul_cache_stats();
  for (int i = 0; i < 5; ++i) matmul(a, b);
  backend::cpu::MatmulCacheStats s1 = backend::cpu::matmul_cache_stats();
  EXPECT_EQ(s1.hits - s0.hits, 5);
  EXPECT_EQ(s1.misses, s0.misses);
  matmul(a, random({71, 79}, 7));  // a new shape: one miss
  EXPECT_EQ(backend::cpu::matmul_cache_stats().misses, s1.misses + 1);
  // The cache is bounded.
  for (int n = 1; n <= 140; ++n) matmul(random({40, 40}, 8), random({40, 30 + n}, 9));
  EXPECT_LE(backend::cpu::matmul_cache_stats().size, 128);
}

TEST(LinalgKernel, SmallF32ProductsSkipOneDnnAndMatchReference) {
  // f32 products of at most 2^15 multiply-adds without batch dims run on the
  // small kernel: rows order (N >= 16, b packed unless its rows are
  // contiguous), dots (N < 16, a rows and b columns contiguous, K >= 16), the
  // transposed problem (N < 16, a columns contiguous, no bias), and rows with
  // a packed b for everything else. Every layout pairing, with and without
  // the epilogue; the actor-critic's shapes among them.
  struct Mkn {
    int64_t M, K, N;
  };
  const Mkn shapes[] = {{1, 4, 64},  {1, 64, 64}, {1, 64, 2},  {1, 64, 1},  {64, 4, 64}, {64, 64, 2},
                        {64, 64, 1}, {64, 2, 64}, {2, 64, 64}, {64, 64, 4}, {3, 5, 7},   {5, 130, 17},
                        {7, 3, 200}, {1, 1, 1},   {20, 33, 48}};
  const Layout layouts[] = {Layout::contiguous, Layout::transposed, Layout::strided, Layout::padded};
  uint64_t seed = 900;
  for (const Mkn& d : shapes) {
    ASSERT_LE(d.M * d.K * d.N, int64_t(1) << 15);
    Tensor a0 = random({d.M, d.K}, ++seed), b0 = random({d.K, d.N}, ++seed);
    Tensor bias = random({d.N}, ++seed), init = random({d.M, d.N}, ++seed);
    for (Layout la : layouts) {
      for (Layout lb : layouts) {
        Tensor a = in_layout(a0, la), b = in_layout(b0, lb);
        for (int variant = 0; variant < 3; ++variant) {
          backend::cpu::MatmulEpilogue ep;
          if (variant == 1) ep.bias = &bias;
          if (variant == 2) ep.alpha = 2.5, ep.beta = 0.5;
          Tensor got = variant == 2 ? init.clone() : full({d.M, d.N}, 7.0);  // beta == 0 ignores old values
          Tensor want = variant == 2 ? init.clone() : zeros({d.M, d.N});
          backend::cpu::matmul(a, b, got, ep);
          EXPECT_EQ(backend::cpu::last_matmul_impl(), "small");
          backend::cpu::ref::matmul(a, b, want, ep);
          EXPECT_TRUE(close_for(kF32, got, want, d.K))
              << d.M << "x" << d.K << "x" << d.N << " a " << layout_name(la) << " b " << layout_name(lb)
              << " variant " << variant;
        }
      }
    }
  }
  // Strided output (a column of a wider tensor) and a linear layer at batch 1.
  Tensor wide = zeros({8, 6}), a = random({8, 5}, 1), b = random({5, 3}, 2), want = zeros({8, 3});
  backend::cpu::matmul(a, b, wide.slice(1, 0, 6, 2));
  backend::cpu::ref::matmul(a, b, want);
  EXPECT_TRUE(close_for(kF32, wide.slice(1, 0, 6, 2), want, 5));
  Tensor x = random({4}, 3), w = random({64, 4}, 4), bl = random({64}, 5);
  EXPECT_TRUE(all_close(linear(x, w, bl), add(matmul(w, x), bl), 1e-5, 1e-5));
  // Above the threshold, batched, or not f32: not the small kernel.
  backend::cpu::matmul(random({33, 32}, 6), random({32, 32}, 7), zeros({33, 32}));
  EXPECT_NE(backend::cpu::last_matmul_impl(), "small");
  backend::cpu::matmul(random({2, 3, 4}, 6), random({2, 4, 5}, 7), zeros({2, 3, 5}));
  EXPECT_NE(backend::cpu::last_matmul_impl(), "small");
  // bf16 on bf16 instructions is oneDNN's; where bf16 computes in f32
  // (Bf16Compute::f32) the widened product is an f32 one and may be small.
  backend::cpu::matmul(random({3, 4}, 6, kBF16), random({4, 5}, 7, kBF16), zeros({3, 5}, {.dtype = kBF16}));
  if (cpu_info().bf16 == Bf16Compute::native) {
    EXPECT_NE(backend::cpu::last_matmul_impl(), "small");
  }
}

TEST(LinalgKernel, ThreadCountFollowsKiln) {
  int saved = get_num_threads();
  // Large enough to run on kiln's count (small products run on one thread).
  Tensor a = random({128, 128}, 10), b = random({128, 128}, 11);
  Tensor want = zeros({128, 128});
  backend::cpu::ref::matmul(a, b, want);
  for (int n : {1, 2, 3}) {
    set_num_threads(n);
    omp_set_num_threads(n == 1 ? 4 : 1);  // someone changed this thread's OpenMP count behind kiln's back
    EXPECT_TRUE(all_close(matmul(a, b), want, 1e-4, 1e-4));
    EXPECT_EQ(omp_get_max_threads(), get_num_threads());  // n, or the CPUs when fewer (set_num_threads clamps)
  }
  set_num_threads(saved);
}

// ---------------------------------------------------------------------------
// Gradchecks in f64
// ---------------------------------------------------------------------------

TEST(LinalgGrad, MatmulShapes) {
  Fn f = [](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); };
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 4}, {4, 2}},       {{4}, {4, 3}},       {{2, 4}, {4}},      {{5}, {5}},
      {{2, 3, 4}, {4, 2}},    {{3, 4}, {2, 4, 2}}, {{4}, {2, 4, 3}},   {{2, 3, 4}, {4}},
      {{2, 1, 3, 4}, {5, 4, 2}}, {{2, 3, 4}, {2, 4, 2}}, {{1, 3, 4}, {2, 1, 4, 2}},
  };
  uint64_t seed = 1000;
  for (const auto& [sa, sb] : shapes) {
    SCOPED_TRACE(to_string(sa) + " x " + to_string(sb));
    EXPECT_GRADCHECK(f, {leaf(sa, ++seed), leaf(sb, ++seed)});
    EXPECT_GRADCHECK(f, {noncontiguous(leaf(sa, ++seed)), noncontiguous(leaf(sb, ++seed))});
  }
}

TEST(LinalgGrad, MatmulOneSideAndTransposedViews) {
  Tensor a = leaf({3, 4}, 1), b = leaf({3, 2}, 2);
  // a^T as a view: the vjp flows back through transpose.
  EXPECT_GRADCHECK([](const std::vector<Tensor>& x) { return matmul(x[0].t(), x[1]); }, {a, b});
  // Only one operand requires grad.
  Tensor c = leaf({4, 2}, 3).detach();
  EXPECT_GRADCHECK([c](const std::vector<Tensor>& x) { return matmul(x[0], c); }, {leaf({3, 4}, 4)});
  EXPECT_GRADCHECK([c](const std::vector<Tensor>& x) { return matmul(x[0], c); }, {leaf({5, 2, 3, 4}, 5)});
  EXPECT_GRADCHECK([c](const std::vector<Tensor>& x) { return matmul(c.t(), x[0]); }, {leaf({3, 4, 5}, 6)});
}

TEST(LinalgGrad, MmBmm) {
  EXPECT_GRADCHECK([](const std::vector<Tensor>& x) { return mm(x[0], x[1]); }, {leaf({3, 5}, 1), leaf({5, 2}, 2)});
  EXPECT_GRADCHECK([](const std::vector<Tensor>& x) { return mm(x[0], x[1]); },
                   {noncontiguous(leaf({3, 5}, 3)), noncontiguous(leaf({5, 2}, 4))});
  EXPECT_GRADCHECK([](const std::vector<Tensor>& x) { return bmm(x[0], x[1]); },
                   {leaf({2, 3, 4}, 5), leaf({2, 4, 3}, 6)});
  EXPECT_GRADCHECK([](const std::vector<Tensor>& x) { return bmm(x[0], x[1]); },
                   {noncontiguous(leaf({2, 3, 4}, 7)), noncontiguous(leaf({2, 4, 3}, 8))});
}

TEST(LinalgGrad, Linear) {
  Fn with_bias = [](const std::vector<Tensor>& x) { return linear(x[0], x[1], x[2]); };
  Fn no_bias = [](const std::vector<Tensor>& x) { return linear(x[0], x[1]); };
  uint64_t seed = 2000;
  for (const Shape& xs : {Shape{4}, Shape{3, 4}, Shape{2, 3, 4}, Shape{2, 1, 2, 4}}) {
    SCOPED_TRACE(to_string(xs));
    EXPECT_GRADCHECK(with_bias, {leaf(xs, ++seed), leaf({5, 4}, ++seed), leaf({5}, ++seed)});
    EXPECT_GRADCHECK(no_bias, {leaf(xs, ++seed), leaf({5, 4}, ++seed)});
    EXPECT_GRADCHECK(with_bias, {noncontiguous(leaf(xs, ++seed)), noncontiguous(leaf({5, 4}, ++seed)), leaf({5}, ++seed)});
  }
  // Weight frozen, only the input needs a gradient (and the reverse).
  Tensor w = leaf({3, 4}, 1).detach();
  EXPECT_GRADCHECK([w](const std::vector<Tensor>& x) { return linear(x[0], w); }, {leaf({2, 4}, 2)});
  Tensor in = leaf({2, 4}, 3).detach();
  EXPECT_GRADCHECK([in](const std::vector<Tensor>& x) { return linear(in, x[0], x[1]); }, {leaf({3, 4}, 4), leaf({3}, 5)});
}

TEST(LinalgGrad, LinearBackwardKernelPathMatchesComposite) {
  // Without create_graph linear's vjp calls the kernel on flattened views
  // (contiguous g and x); with it, or a non-contiguous x, the composite ops.
  // Both must give g @ W, g^T x and the row sums of g.
  for (bool contiguous_x : {true, false}) {
    for (bool create_graph : {false, true}) {
      SCOPED_TRACE(fmt::format("contiguous_x {} create_graph {}", contiguous_x, create_graph));
      Tensor x0 = random({2, 3, 5}, 1), w = random({4, 5}, 2).requires_grad_(), b = random({4}, 3).requires_grad_();
      Tensor x = (contiguous_x ? x0 : in_layout(x0, Layout::transposed)).requires_grad_();
      Tensor g = random({2, 3, 4}, 4);
      auto grads = kiln::grad({linear(x, w, b)}, {x, w, b}, {g}, false, create_graph);
      Tensor g2 = reshape(g, {6, 4}), x2 = reshape(x0, {6, 5});
      NoGradGuard ng;
      EXPECT_TRUE(all_close(grads[0], reshape(matmul(g2, w), {2, 3, 5}), 1e-5, 1e-5));
      EXPECT_TRUE(all_close(grads[1], matmul(g2.t(), x2), 1e-5, 1e-5));
      EXPECT_TRUE(all_close(grads[2], sum(g2, {0}), 1e-5, 1e-5));
      EXPECT_EQ(grads[0].requires_grad(), create_graph);
    }
  }
  // Zero rows: zero weight and bias gradients.
  Tensor x = zeros({0, 5}).requires_grad_(), w = random({4, 5}, 5).requires_grad_(), b = zeros({4}).requires_grad_();
  auto grads = kiln::grad({linear(x, w, b)}, {x, w, b}, {zeros({0, 4})});
  EXPECT_TRUE(testing::equal(grads[1], zeros({4, 5})));
  EXPECT_TRUE(testing::equal(grads[2], zeros({4})));
}

TEST(LinalgGrad, Addmm) {
  uint64_t seed = 3000;
  for (const Shape& is : {Shape{3, 4}, Shape{4}, Shape{3, 1}, Shape{1, 4}, Shape{}}) {
    for (auto [beta, alpha] : {std::pair<double, double>{1, 1}, {0.5, 2}, {0, -1.5}}) {
      SCOPED_TRACE(to_string(is) + " beta " + std::to_string(beta) + " alpha " + std::to_string(alpha));
      Fn f = [beta, alpha](const std::vector<Tensor>& x) { return addmm(x[0], x[1], x[2], beta, alpha); };
      EXPECT_GRADCHECK(f, {leaf(is, ++seed), leaf({3, 5}, ++seed), leaf({5, 4}, ++seed)});
      EXPECT_GRADCHECK(f, {noncontiguous(leaf(is, ++seed)), noncontiguous(leaf({3, 5}, ++seed)),
                           noncontiguous(leaf({5, 4}, ++seed))});
    }
  }
}

TEST(LinalgGrad, OuterDot) {
  EXPECT_GRADCHECK([](const std::vector<Tensor>& x) { return outer(x[0], x[1]); }, {leaf({3}, 1), leaf({4}, 2)});
  EXPECT_GRADCHECK([](const std::vector<Tensor>& x) { return dot(x[0], x[1]); }, {leaf({5}, 3), leaf({5}, 4)});
  // Strided vectors: a column of a matrix.
  EXPECT_GRADCHECK([](const std::vector<Tensor>& x) { return dot(x[0].select(1, 1), x[1]); },
                   {leaf({5, 3}, 5), leaf({5}, 6)});
}

TEST(LinalgGrad, SecondOrderThroughMatmul) {
  // d/da of sum((a @ b)^2) computed with create_graph, then differentiated again.
  Fn f = [](const std::vector<Tensor>& x) {
    EnableGradGuard on;  // gradcheck evaluates fn under NoGradGuard; the inner grad needs the tape
    Tensor y = matmul(x[0], x[1]);
    Tensor ga = grad({sum(mul(y, y))}, {x[0]}, {}, /*retain_graph=*/true, /*create_graph=*/true)[0];
    return ga;
  };
  EXPECT_GRADCHECK(f, {leaf({2, 3}, 1), leaf({3, 2}, 2)});
}

TEST(LinalgGrad, Bf16BackwardKeepsDtype) {
  Tensor x = random({4, 6}, 1, kBF16), w = random({3, 6}, 2, kBF16), b = random({3}, 3, kBF16);
  x.requires_grad_();
  w.requires_grad_();
  b.requires_grad_();
  sum(linear(x, w, b)).backward();
  EXPECT_EQ(x.grad().dtype(), kBF16);
  EXPECT_EQ(w.grad().dtype(), kBF16);
  // grad_b = rows summed over the 4 rows of ones.
  EXPECT_TRUE(all_close(b.grad(), full({3}, 4.0, {.dtype = kBF16})));
  // grad_x = ones @ W: column sums of W.
  EXPECT_TRUE(all_close(x.grad(), expand(sum(to(w, kF32), {0}), {4, 6}).contiguous().to(kBF16), 2e-2, 2e-2));
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

TEST(LinalgErrors, Messages) {
  Tensor a23 = zeros({2, 3}), a45 = zeros({4, 5});
  EXPECT_KILN_ERROR(matmul(a23, a45), "[matmul] a [2, 3] and b [4, 5] cannot be multiplied: inner dims 3 and 4 differ");
  EXPECT_KILN_ERROR(mm(a23, a45), "[mm] a [2, 3] and b [4, 5] cannot be multiplied: inner dims 3 and 4 differ");
  EXPECT_KILN_ERROR(matmul(zeros({3}), zeros({4})), "inner dims 3 and 4 differ");
  EXPECT_KILN_ERROR(matmul(zeros({2, 3}), zeros({4})), "inner dims 3 and 4 differ");
  EXPECT_KILN_ERROR(matmul(scalar_tensor(1.0), a23), "[matmul] both arguments need at least 1 dim, got a [] (0-D)");
  EXPECT_KILN_ERROR(matmul(a23, scalar_tensor(1.0)), "b [] (0-D)");
  EXPECT_KILN_ERROR(matmul(a23, zeros({3, 2}, {.dtype = kF64})), "[matmul] dtype mismatch: a [2, 3] is f32 and b [3, 2] is f64");
  EXPECT_KILN_ERROR(matmul(zeros({2, 3}, {.dtype = kBool}), zeros({3, 2}, {.dtype = kBool})),
                    "[matmul] bool tensors are not supported");
  EXPECT_KILN_ERROR(matmul(zeros({2, 2, 3}), zeros({3, 3, 4})),
                    "[matmul] batch dims of a [2, 2, 3] and b [3, 3, 4] do not broadcast");
  EXPECT_KILN_ERROR(matmul(Tensor(), a23), "[matmul] a is an undefined tensor");
  EXPECT_KILN_ERROR(mm(zeros({2, 3, 4}), a45), "[mm] expects 2-D tensors, got a [2, 3, 4] and b [4, 5]");
  EXPECT_KILN_ERROR(bmm(zeros({2, 3, 4}), zeros({3, 4, 5})), "[bmm] batch sizes differ: a [2, 3, 4] and b [3, 4, 5]");
  EXPECT_KILN_ERROR(bmm(a23, zeros({3, 2})), "[bmm] expects 3-D tensors");
  EXPECT_KILN_ERROR(bmm(zeros({2, 3, 4}), zeros({2, 5, 4})), "[bmm] a [2, 3, 4] and b [2, 5, 4] cannot be multiplied");
  EXPECT_KILN_ERROR(linear(zeros({32, 780}), zeros({256, 784})),
                    "[linear] input [32, 780] does not match weight [256, 784] (in_features 784)");
  EXPECT_KILN_ERROR(linear(zeros({2, 4}), zeros({3, 4}), zeros({4})),
                    "[linear] bias [4] does not match weight [3, 4] (expected [3], out_features)");
  EXPECT_KILN_ERROR(linear(zeros({2, 4}), zeros({4})), "[linear] weight [4] must be 2-D");
  EXPECT_KILN_ERROR(linear(scalar_tensor(1.0), zeros({3, 4})), "[linear] input must have at least 1 dim");
  EXPECT_KILN_ERROR(linear(zeros({2, 4}), zeros({3, 4}, {.dtype = kF64})), "[linear] dtype mismatch: input [2, 4] is f32");
  EXPECT_KILN_ERROR(linear(zeros({2, 4}), zeros({3, 4}), zeros({3}, {.dtype = kBF16})),
                    "[linear] dtype mismatch: bias [3] is bf16");
  EXPECT_KILN_ERROR(addmm(zeros({3, 4}), a23, zeros({3, 5})),
                    "[addmm] input [3, 4] does not broadcast to the product's shape [2, 5]");
  EXPECT_KILN_ERROR(addmm(zeros({5}), a23, zeros({4, 5})), "[addmm] a [2, 3] and b [4, 5] cannot be multiplied");
  EXPECT_KILN_ERROR(addmm(zeros({5}, {.dtype = kF64}), a23, zeros({3, 5})), "[addmm] dtype mismatch: input [5] is f64");
  EXPECT_KILN_ERROR(addmm(zeros({2}, {.dtype = kI64}), zeros({2, 2}, {.dtype = kI64}), zeros({2, 2}, {.dtype = kI64}), 1, 0.5),
                    "[addmm] alpha and beta must be integers for i64 tensors");
  EXPECT_KILN_ERROR(outer(a23, zeros({3})), "[outer] expects 1-D tensors, got a [2, 3] and b [3]");
  EXPECT_KILN_ERROR(dot(zeros({3}), zeros({4})), "[dot] sizes differ: a [3] and b [4]");
  EXPECT_KILN_ERROR(dot(zeros({3}), zeros({3}, {.dtype = kF64})), "[dot] dtype mismatch");
  EXPECT_KILN_ERROR(dot(a23, a23), "[dot] expects 1-D tensors");
}

TEST(LinalgErrors, FailedCallsLeaveInputsAlone) {
  Tensor a = leaf({2, 3}, 1), b = leaf({4, 5}, 2);
  auto before = a.to_vector<double>();
  EXPECT_KILN_ERROR(matmul(a, b), "inner dims");
  EXPECT_EQ(a.to_vector<double>(), before);
  EXPECT_FALSE(a.grad().defined());
  EXPECT_TRUE(a.is_leaf());
}

}  // namespace
}  // namespace kiln
