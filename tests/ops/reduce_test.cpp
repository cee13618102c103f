// Tests of kiln/ops/reduce.h (softmax is in softmax_test.cpp): PyTorch
// goldens, the reduction engine against backend::cpu::ref over awkward shapes, layouts
// and dtypes, f32 accuracy, thread-count determinism, gradchecks in f64,
// empty tensors and error messages.
#include <cmath>
#include <cstring>
#include <functional>
#include <map>

#include "src/backend/cpu/reduce/reduce.h"
#include "tests/support/ops_devices.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;
using Outs = std::vector<Tensor>;
using CaseFn = std::function<Outs(const Tensor&)>;

// ---------------------------------------------------------------------------
// Goldens
// ---------------------------------------------------------------------------

// Runs every case of tests/goldens/<file>.json through `fns` (by case name),
// on the input as stored and in a non-contiguous layout.
void check_goldens(const std::string& file, const std::map<std::string, CaseFn>& fns) {
  const auto& j = golden(file);
  std::map<std::string, Tensor> inputs;
  for (const auto& [k, v] : j.at("inputs").items()) inputs[k] = golden_tensor(v);
  for_each_device([&](Device d) {
  size_t seen = 0;
  for (const auto& c : j.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE(file + ": " + name);
    auto it = fns.find(name);
    ASSERT_NE(it, fns.end()) << "no kiln call for golden case " << name;
    ++seen;
    const Tensor& x = inputs.at(c.at("x").get<std::string>());
    for (bool nc : {false, true}) {
      SCOPED_TRACE(nc ? "non-contiguous" : "contiguous");
      Outs got = it->second(to(nc ? noncontiguous(x) : x, d));
      for (Tensor& t : got) t = to(t, kCPU);
      ASSERT_EQ(got.size(), c.at("out").size());
      for (size_t i = 0; i < got.size(); ++i) {
        Tensor want = golden_tensor(c.at("out")[i]);
        EXPECT_EQ(got[i].dtype(), want.dtype()) << "output " << i;
        if (is_floating(want.dtype())) EXPECT_TRUE(all_close(got[i], want, 1e-5, 1e-6)) << "output " << i;
        else EXPECT_TRUE(equal(got[i], want)) << "output " << i;
      }
    }
  }
  EXPECT_EQ(seen, fns.size()) << "some kiln calls have no golden case in " << file;
  });
}

Outs pair(std::pair<Tensor, Tensor> p) { return {p.first, p.second}; }

TEST(ReduceGolden, SumMeanProdCumsum) {
  check_goldens("reduce_sum", {
      {"sum_all", [](const Tensor& x) { return Outs{sum(x)}; }},
      {"sum_1", [](const Tensor& x) { return Outs{sum(x, {1})}; }},
      {"sum_02_keep", [](const Tensor& x) { return Outs{sum(x, {0, 2}, true)}; }},
      {"sum_neg1", [](const Tensor& x) { return Outs{sum(x, {-1})}; }},
      {"sum_i32_all", [](const Tensor& x) { return Outs{sum(x)}; }},
      {"sum_i32_2", [](const Tensor& x) { return Outs{sum(x, {2})}; }},
      {"sum_bool_0", [](const Tensor& x) { return Outs{sum(x, {0})}; }},
      {"sum_empty", [](const Tensor& x) { return Outs{sum(x), sum(x, {0}), sum(x, {1})}; }},
      {"mean_all", [](const Tensor& x) { return Outs{mean(x)}; }},
      {"mean_12", [](const Tensor& x) { return Outs{mean(x, {1, 2})}; }},
      {"mean_0_keep", [](const Tensor& x) { return Outs{mean(x, {0}, true)}; }},
      {"prod_all", [](const Tensor& x) { return Outs{prod(x)}; }},
      {"prod_1", [](const Tensor& x) { return Outs{prod(x, 1)}; }},
      {"prod_zeros_2", [](const Tensor& x) { return Outs{prod(x, 2)}; }},
      {"prod_i32_1", [](const Tensor& x) { return Outs{prod(x, 1)}; }},
      {"cumsum_0", [](const Tensor& x) { return Outs{cumsum(x, 0)}; }},
      {"cumsum_2", [](const Tensor& x) { return Outs{cumsum(x, 2)}; }},
      {"cumsum_i32_1", [](const Tensor& x) { return Outs{cumsum(x, 1)}; }},
      {"cumsum_bool_1", [](const Tensor& x) { return Outs{cumsum(x, 1)}; }},
  });
}

TEST(ReduceGolden, Extremes) {
  check_goldens("reduce_extreme", {
      {"max_all", [](const Tensor& x) { return Outs{max(x)}; }},
      {"min_all", [](const Tensor& x) { return Outs{min(x)}; }},
      {"max_1", [](const Tensor& x) { return pair(max(x, 1)); }},
      {"min_0_keep", [](const Tensor& x) { return pair(min(x, 0, true)); }},
      {"max_neg1", [](const Tensor& x) { return pair(max(x, -1)); }},
      {"argmax_all", [](const Tensor& x) { return Outs{argmax(x)}; }},
      {"argmin_2", [](const Tensor& x) { return Outs{argmin(x, 2)}; }},
      {"argmax_0_keep", [](const Tensor& x) { return Outs{argmax(x, 0, true)}; }},
      {"max_ties_1", [](const Tensor& x) { return pair(max(x, 1)); }},
      {"min_ties_0", [](const Tensor& x) { return pair(min(x, 0)); }},
      {"argmax_ties_1", [](const Tensor& x) { return Outs{argmax(x, 1)}; }},
      {"argmin_ties_all", [](const Tensor& x) { return Outs{argmin(x)}; }},
      {"max_i64_1", [](const Tensor& x) { return pair(max(x, 1)); }},
      {"argmin_i64_0", [](const Tensor& x) { return Outs{argmin(x, 0)}; }},
      {"max_nan_1", [](const Tensor& x) { return pair(max(x, 1)); }},
      {"min_nan_0", [](const Tensor& x) { return pair(min(x, 0)); }},
      {"max_nan_all", [](const Tensor& x) { return Outs{max(x)}; }},
      {"amax_nan_1", [](const Tensor& x) { return Outs{amax(x, {1})}; }},
      {"amax_02", [](const Tensor& x) { return Outs{amax(x, {0, 2})}; }},
      {"amin_1_keep", [](const Tensor& x) { return Outs{amin(x, {1}, true)}; }},
      {"amax_all", [](const Tensor& x) { return Outs{amax(x, {})}; }},
      {"amax_i64_1", [](const Tensor& x) { return Outs{amax(x, {1})}; }},
      {"max_inf_1", [](const Tensor& x) { return pair(max(x, 1)); }},
  });
}

TEST(ReduceGolden, Statistics) {
  constexpr double kInf = INFINITY;
  check_goldens("reduce_stats", {
      {"var_all", [](const Tensor& x) { return Outs{var(x)}; }},
      {"var_1", [](const Tensor& x) { return Outs{var(x, {1})}; }},
      {"var_02_biased_keep", [](const Tensor& x) { return Outs{var(x, {0, 2}, false, true)}; }},
      {"std_all_biased", [](const Tensor& x) { return Outs{std(x, false)}; }},
      {"std_2", [](const Tensor& x) { return Outs{std(x, {2})}; }},
      {"norm_2_all", [](const Tensor& x) { return Outs{norm(x)}; }},
      {"norm_1_2", [](const Tensor& x) { return Outs{norm(x, 1, {2})}; }},
      {"norm_inf_1", [](const Tensor& x) { return Outs{norm(x, kInf, {1})}; }},
      {"norm_neginf_1", [](const Tensor& x) { return Outs{norm(x, -kInf, {1})}; }},
      {"norm_3_02_keep", [](const Tensor& x) { return Outs{norm(x, 3, {0, 2}, true)}; }},
      {"norm_half_2", [](const Tensor& x) { return Outs{norm(x, 0.5, {2})}; }},
      {"norm_0_1", [](const Tensor& x) { return Outs{norm(x, 0, {1})}; }},
      {"logsumexp_1", [](const Tensor& x) { return Outs{logsumexp(x, {1})}; }},
      {"logsumexp_02_keep", [](const Tensor& x) { return Outs{logsumexp(x, {0, 2}, true)}; }},
      {"logsumexp_inf_1", [](const Tensor& x) { return Outs{logsumexp(x, {1})}; }},
      {"all_bool", [](const Tensor& x) { return Outs{all(x), all(x, 0), all(x, 1, true)}; }},
      {"any_i32", [](const Tensor& x) { return Outs{any(x), any(x, 0), any(x, 1)}; }},
      {"all_f32_1", [](const Tensor& x) { return Outs{all(x, 1)}; }},
      {"all_any_u8", [](const Tensor& x) { return Outs{all(x), any(x, 1), all(x, 0)}; }},
  });
}

// ---------------------------------------------------------------------------
// Fast kernels against backend::cpu::ref
// ---------------------------------------------------------------------------

// Values of dtype t: floats in (-2, 2), integers in [-2, 2], bools ~half true.
Tensor random_of(const Shape& shape, DType t, uint64_t seed) {
  Generator gen(seed);
  if (t == kBool) return gt(rand(shape, gen), 0.5);
  if (!is_floating(t)) return to(randint(-2, 3, shape, gen), t);
  return to(mul(sub(rand(shape, gen, {.dtype = kF64}), 0.5), 4.0), t);
}

// The same values in another memory layout.
enum class Layout { contiguous, permuted, strided, expanded };
const char* layout_name(Layout l) {
  switch (l) {
    case Layout::contiguous: return "contiguous";
    case Layout::permuted: return "permuted";
    case Layout::strided: return "strided";
    case Layout::expanded: return "expanded";
  }
  return "?";
}

Tensor in_layout(const Tensor& x, Layout l) {
  NoGradGuard no_grad;
  switch (l) {
    case Layout::contiguous: return x;
    case Layout::permuted: return noncontiguous(x);
    case Layout::strided: {  // every other element of a wider buffer: no stride-1 dim
      if (x.dim() == 0) return x;
      Shape s = x.shape();
      s[s.size() - 1] *= 2;
      Tensor v = zeros(s, {.dtype = x.dtype()}).slice(-1, 0, s.back(), 2);
      copy_(v, x);
      return v;
    }
    case Layout::expanded: {  // dim 0 broadcast from one row (stride 0)
      if (x.dim() == 0 || x.shape()[0] == 0) return x;
      return x.narrow(0, 0, 1).expand(x.shape());
    }
  }
  return x;
}

struct ReduceCase {
  Shape shape;
  std::vector<Shape> dims;
};

// Shapes that exercise both kernel forms, merging, size-1 dims, several
// leaves per output, the parallel paths and empty tensors.
std::vector<ReduceCase> reduce_cases() {
  return {
      {{7, 13, 5}, {{}, {0}, {1}, {2}, {0, 2}, {0, 1}, {1, 2}, {0, 1, 2}}},
      {{1, 300, 1, 90}, {{1}, {3}, {0, 2}, {1, 3}, {0, 1, 2, 3}}},
      {{2000, 70}, {{0}, {1}, {0, 1}}},
      {{3, 50001}, {{1}, {0}}},
      {{30000, 20}, {{0}}},  // column form with one tile: its leaves run in parallel
      {{100003}, {{0}}},
      {{4, 3, 2, 5, 3}, {{0, 2, 4}, {1, 3}, {4}}},
      {{0, 4}, {{1}}},
      {{5, 1, 33}, {{1}, {0, 2}}},
      {{}, {{}}},
  };
}

// Reduced shape (dims removed); dims is sorted and unique here.
Shape kept_shape(const Shape& s, const Shape& dims) {
  Shape out;
  for (int64_t d = 0; d < int64_t(s.size()); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) out.push_back(s[d]);
  return out;
}

// Tolerance for a fast f32/bf16 sum-like result against the f64 ref: relative
// to the sum of magnitudes of what was reduced (f64: the ref's own running-sum
// error over 1e5 elements).
double tol_for(DType t) { return t == kBF16 ? 1e-2 : t == kF32 ? 2e-6 : 1e-10; }

using Kernel = void (*)(const Tensor&, const Tensor&, const Shape&);

void expect_same(const Tensor& fast, const Tensor& ref, DType in_dtype, const Tensor& scale) {
  if (!is_floating(fast.dtype())) {
    EXPECT_TRUE(equal(fast, ref));
    return;
  }
  // |fast - ref| <= tol * (|ref| + l1 of the reduced elements)
  auto f = fast.to_vector<double>(), r = ref.to_vector<double>(), s = scale.to_vector<double>();
  for (size_t i = 0; i < f.size(); ++i) {
    if (std::isnan(f[i]) && std::isnan(r[i])) continue;
    double tol = tol_for(in_dtype) * (std::abs(r[i]) + s[i]) + 1e-30;
    ASSERT_LE(std::abs(f[i] - r[i]), tol) << "element " << i << " of " << to_string(fast.shape()) << ": " << f[i]
                                          << " vs " << r[i];
  }
}

TEST(ReduceKernels, FastMatchesRef) {
  uint64_t seed = 100;
  for (const auto& rc : reduce_cases())
    for (const Shape& dims : rc.dims)
      for (Layout l : {Layout::contiguous, Layout::permuted, Layout::strided, Layout::expanded})
        for (DType t : {kF32, kF64, kBF16, kI32, kI64, kBool, kU8}) {
          // Every dtype and norm on the small shapes; the big ones (parallel paths)
          // in f32 and i64, without the stride-0 layout.
          const bool big = numel(rc.shape) > 10000;
          if (big && ((t != kF32 && t != kI64) || l == Layout::expanded)) continue;
          SCOPED_TRACE(fmt::format("shape {} dims {} layout {} dtype {}", to_string(rc.shape), to_string(dims),
                                   layout_name(l), name(t)));
          Tensor x = in_layout(random_of(rc.shape, t, ++seed), l);
          Shape out_shape = kept_shape(rc.shape, dims);
          DType sum_t = is_floating(t) ? t : kI64;
          Tensor l1 = Tensor::empty(out_shape, kF64);
          backend::cpu::ref::sum(is_floating(t) ? abs(to(x, kF64)) : to(x, kF64), l1, dims);
          auto both = [&](Kernel fast, Kernel ref, DType out_t) {
            Tensor a = Tensor::empty(out_shape, out_t), b = Tensor::empty(out_shape, out_t);
            fast(x, a, dims);
            ref(x, b, dims);
            expect_same(a, b, t, l1);
          };
          both([](const Tensor& x, const Tensor& o, const Shape& d) { backend::cpu::sum(x, o, d); },
               [](const Tensor& x, const Tensor& o, const Shape& d) { backend::cpu::ref::sum(x, o, d); }, sum_t);
          both(backend::cpu::all, backend::cpu::ref::all, kBool);
          both(backend::cpu::any, backend::cpu::ref::any, kBool);
          bool nonempty = numel(rc.shape) > 0 || numel(out_shape) == 0;
          if (nonempty) {
            both(backend::cpu::amax, backend::cpu::ref::amax, t);
            both(backend::cpu::amin, backend::cpu::ref::amin, t);
          }
          if (is_floating(t)) {
            for (double p : {1.0, 2.0, 3.0, double(INFINITY)}) {
              if (big && p != 2.0) continue;
              SCOPED_TRACE(fmt::format("norm p={}", p));
              Tensor a = Tensor::empty(out_shape, t), b = Tensor::empty(out_shape, t);
              backend::cpu::norm(x, a, dims, p);
              backend::cpu::ref::norm(x, b, dims, p);
              Tensor sc = p == 1 ? l1 : zeros(out_shape, {.dtype = kF64});
              expect_same(a, b, t, sc);
            }
          }
        }
}

TEST(ReduceKernels, ProdMatchesRef) {
  uint64_t seed = 900;
  for (const auto& rc : reduce_cases())
    for (const Shape& dims : rc.dims)
      for (Layout l : {Layout::contiguous, Layout::permuted, Layout::strided})
        for (DType t : {kF32, kF64, kI64}) {
          if (numel(rc.shape) > 10000 && t != kF32) continue;  // big shapes: f32 only
          SCOPED_TRACE(fmt::format("shape {} dims {} layout {} dtype {}", to_string(rc.shape), to_string(dims),
                                   layout_name(l), name(t)));
          Generator gen(++seed);
          // Floats near 1 so long products stay finite; integers in {-1, 1, 2}.
          Tensor base = is_floating(t) ? add(mul(randn(rc.shape, gen, {.dtype = kF64}), 0.002), 1.0)
                                       : sub(mul(randint(0, 2, rc.shape, gen), 2), 1);
          Tensor x = in_layout(to(base, t), l);
          Shape out_shape = kept_shape(rc.shape, dims);
          Tensor a = Tensor::empty(out_shape, is_floating(t) ? t : kI64), b = Tensor::empty(out_shape, a.dtype());
          backend::cpu::prod(x, a, dims);
          backend::cpu::ref::prod(x, b, dims);
          if (is_floating(t)) EXPECT_TRUE(all_close(a, b, t == kF32 ? 1e-4 : 1e-12, 0));
          else EXPECT_TRUE(equal(a, b));
        }
}

TEST(ReduceKernels, MaxDimAndCumsumMatchRef) {
  uint64_t seed = 500;
  const std::vector<Shape> shapes = {{7, 13, 5}, {1, 300, 1, 90}, {2000, 70}, {3, 50001}, {5, 1, 33}, {6}, {}};
  for (const Shape& s : shapes)
    for (int64_t dim = 0; dim < std::max<int64_t>(int64_t(s.size()), 1); ++dim)
      for (Layout l : {Layout::contiguous, Layout::permuted, Layout::strided})
        for (DType t : {kF32, kF64, kBF16, kI32, kI64, kBool}) {
          if (numel(s) > 10000 && t != kF32 && t != kI32) continue;  // big shapes: two dtypes
          SCOPED_TRACE(fmt::format("shape {} dim {} layout {} dtype {}", to_string(s), dim, layout_name(l), name(t)));
          Tensor x = in_layout(random_of(s, t, ++seed), l);  // small integers: many ties
          Shape out_shape = s;
          if (!s.empty()) out_shape.erase(size_t(dim));
          for (bool is_max : {true, false}) {
            Tensor v1 = Tensor::empty(out_shape, t), i1 = Tensor::empty(out_shape, kI64);
            Tensor v2 = Tensor::empty(out_shape, t), i2 = Tensor::empty(out_shape, kI64);
            if (is_max) {
              backend::cpu::max_dim(x, dim, v1, i1);
              backend::cpu::ref::max_dim(x, dim, v2, i2);
            } else {
              backend::cpu::min_dim(x, dim, v1, i1);
              backend::cpu::ref::min_dim(x, dim, v2, i2);
            }
            EXPECT_TRUE(equal(v1, v2)) << (is_max ? "max" : "min");
            EXPECT_TRUE(equal(i1, i2)) << (is_max ? "argmax" : "argmin");
          }
          DType ct = is_floating(t) ? t : kI64;
          Tensor c1 = Tensor::empty(s, ct), c2 = Tensor::empty(s, ct);
          backend::cpu::cumsum(x, dim, c1);
          backend::cpu::ref::cumsum(x, dim, c2);
          EXPECT_TRUE(equal(c1, c2)) << "cumsum";
        }
}

TEST(ReduceKernels, FirstOccurrenceAndNaN) {
  // Ties pick the first index, NaN wins over numbers, both along rows and columns.
  Tensor x = tensor<float>({1, 3, 3, 0, 3, NAN, 2, NAN, 5, 5, -1, -1}, {3, 4});
  auto [v, i] = max(x, 1);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 0}));
  EXPECT_TRUE(std::isnan(v.to_vector<float>()[1]));
  auto [v0, i0] = min(x, 0);
  EXPECT_EQ(i0.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 1}));
  EXPECT_TRUE(std::isnan(v0.to_vector<float>()[1]));
  EXPECT_EQ(argmax(x).item<int64_t>(), 5);
  EXPECT_EQ(argmin(tensor<int32_t>({4, -2, 7, -2}, {4})).item<int64_t>(), 1);
}

// ---------------------------------------------------------------------------
// Accuracy and determinism
// ---------------------------------------------------------------------------

TEST(ReduceAccuracy, F32SumOfMillionStaysAccurate) {
  const int64_t n = 1000000;
  const double want = double(n) * double(0.1f);
  Tensor x = full({n}, 0.1f);
  // A running f32 sum would be off by ~1%; pairwise stays within a few ulp.
  EXPECT_NEAR(sum(x).item<float>(), want, want * 1e-6);
  EXPECT_NEAR(mean(x).item<float>(), double(0.1f), 1e-7);
  // Column form: [n, 3] reduced over dim 0, and a permuted layout of it.
  Tensor c = full({n, 3}, 0.1f);
  for (float v : sum(c, {0}).to_vector<float>()) EXPECT_NEAR(v, want, want * 1e-6);
  for (float v : sum(c.t(), {1}).to_vector<float>()) EXPECT_NEAR(v, want, want * 1e-6);
  // bf16 accumulates in f32: 4096 ones sum exactly (a bf16 running sum stops at 256).
  EXPECT_EQ(sum(ones({4096}, {.dtype = kBF16})).item<float>(), 4096.0f);
  EXPECT_EQ(sum(ones({4096, 2}, {.dtype = kBF16}), {0}).to_vector<float>(), (std::vector<float>{4096, 4096}));
}

// Bitwise equality of two tensors' raw bytes.
bool same_bits(const Tensor& a, const Tensor& b) {
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.shape() == cb.shape() && ca.dtype() == cb.dtype() &&
         std::memcmp(ca.data_ptr(), cb.data_ptr(), size_t(ca.nbytes())) == 0;
}

TEST(ReduceDeterminism, BitIdenticalForOneAndTwoThreads) {
  const int saved = get_num_threads();
  Generator gen(7);
  Tensor big = randn({3000, 700}, gen);
  Tensor flat = randn({2000003}, gen);
  Tensor few = randn({3, 400001}, gen);
  Tensor tall = randn({400001, 3}, gen);
  auto run = [&] {
    return std::vector<Tensor>{sum(flat),           sum(big),          sum(big, {0}),     sum(big, {1}),
                               sum(big.t(), {1}),   sum(few, {1}),     sum(few.t(), {0}), mean(big, {0}),
                               norm(big, 2.0, {0}), norm(flat),        amax(big, {0}),    var(big, {1}),
                               logsumexp(big, {1}), softmax(big, 0),   cumsum(big, 0),    prod(few, 0),
                               sum(tall, {0}),      mean(tall, {0}),   amin(tall, {0})};
  };
  set_num_threads(1);
  std::vector<Tensor> one = run();
  set_num_threads(2);
  std::vector<Tensor> two = run();
  set_num_threads(saved);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(same_bits(one[i], two[i])) << "result " << i;
}

// ---------------------------------------------------------------------------
// Gradients (f64 finite differences)
// ---------------------------------------------------------------------------

// Gradchecks f on a leaf of `shape`, contiguous and non-contiguous.
void gradcheck_unary(const std::string& what, const std::function<Tensor(const Tensor&)>& f, const Shape& shape,
                     uint64_t seed, double lo = -1, double hi = 1) {
  for (bool nc : {false, true}) {
    SCOPED_TRACE(what + " on " + to_string(shape) + (nc ? " non-contiguous" : ""));
    Tensor x = leaf(shape, seed, lo, hi);
    if (nc) x = noncontiguous(x);
    EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return f(in[0]); }, {x});
  }
}

const std::vector<Shape> kGradShapes = {{5}, {3, 4}, {2, 3, 4}};

// Reductions over each dim and a pair of dims, keepdim both ways.
void gradcheck_dims(const std::string& what, const std::function<Tensor(const Tensor&, const Shape&, bool)>& f,
                    double lo = -1, double hi = 1) {
  uint64_t seed = 1;
  for (const Shape& s : kGradShapes) {
    std::vector<Shape> dim_sets = {{}};
    for (int64_t d = 0; d < int64_t(s.size()); ++d) dim_sets.push_back({d});
    if (s.size() >= 2) dim_sets.push_back({0, -1});
    for (const Shape& dims : dim_sets)
      for (bool keep : {false, true})
        gradcheck_unary(fmt::format("{} dims {} keepdim {}", what, to_string(dims), keep),
                        [&](const Tensor& x) { return f(x, dims, keep); }, s, ++seed, lo, hi);
  }
}

TEST(ReduceGrad, SumMean) {
  gradcheck_dims("sum", [](const Tensor& x, const Shape& d, bool k) { return sum(x, d, k); });
  gradcheck_dims("mean", [](const Tensor& x, const Shape& d, bool k) { return mean(x, d, k); });
  gradcheck_unary("sum all", [](const Tensor& x) { return sum(x); }, {3, 4}, 3);
  gradcheck_unary("mean all", [](const Tensor& x) { return mean(x); }, {3, 4}, 4);
  gradcheck_unary("sum scalar", [](const Tensor& x) { return sum(x, {0}); }, {}, 5);
  // A broadcast (stride-0) input reaches sum through expand's vjp.
  gradcheck_unary("sum of expanded", [](const Tensor& x) { return sum(x.expand({4, 3, 2}), {0, 2}); }, {3, 1}, 6);
}

TEST(ReduceGrad, Prod) {
  gradcheck_unary("prod all", [](const Tensor& x) { return prod(x); }, {2, 3}, 7, 0.5, 1.5);
  for (int64_t d : {0, 1, -1})
    for (bool k : {false, true})
      gradcheck_unary(fmt::format("prod dim {} keepdim {}", d, k), [=](const Tensor& x) { return prod(x, d, k); },
                      {3, 4}, 8 + uint64_t(d + 1), 0.5, 1.5);
  // With zeros: one zero in a row gets the product of the rest; two zeros give 0.
  Tensor x = tensor<double>({2, 0, 3, 0, 0, 5, 1, 2, 4}, {3, 3});
  x.requires_grad_(true);
  sum(prod(x, 1)).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 6, 0, 0, 0, 0, 8, 4, 2}));
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return prod(in[0], 1); }, {x});
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return prod(in[0]); },
                   {tensor<double>({2, 0, 3, -1}, {4}).requires_grad_(true)});
}

TEST(ReduceGrad, MaxMinAmaxAmin) {
  // Random values in (-1, 1) have no ties.
  for (int64_t d : {0, 1, -1})
    for (bool k : {false, true}) {
      gradcheck_unary(fmt::format("max dim {} keep {}", d, k), [=](const Tensor& x) { return max(x, d, k).first; },
                      {3, 4}, 20 + uint64_t(d + 1));
      gradcheck_unary(fmt::format("min dim {} keep {}", d, k), [=](const Tensor& x) { return min(x, d, k).first; },
                      {2, 3, 4}, 30 + uint64_t(d + 1));
    }
  gradcheck_unary("max all", [](const Tensor& x) { return max(x); }, {3, 4}, 40);
  gradcheck_unary("min all", [](const Tensor& x) { return min(x); }, {3, 4}, 41);
  gradcheck_dims("amax", [](const Tensor& x, const Shape& d, bool k) { return amax(x, d, k); });
  gradcheck_dims("amin", [](const Tensor& x, const Shape& d, bool k) { return amin(x, d, k); });
  // Two-way ties: the central difference sees half the slope on each, which is
  // exactly the even split of amax (and of full max).
  Tensor t = tensor<double>({0.5, 0.9, 0.9, -0.2, 0.1, 0.1}, {2, 3});
  t.requires_grad_(true);
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return amax(in[0], {1}); }, {t});
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return max(in[0]); }, {t});
  sum(amin(t, {1})).backward();
  EXPECT_EQ(t.grad().to_vector<double>(), (std::vector<double>{1, 0, 0, 1, 0, 0}));
  t.set_grad(Tensor());
  sum(amax(t, {1})).backward();
  EXPECT_EQ(t.grad().to_vector<double>(), (std::vector<double>{0, 0.5, 0.5, 0, 0.5, 0.5}));
  // max along a dim gives the whole gradient to the first occurrence.
  Tensor u = tensor<double>({1, 3, 3, 2}, {1, 4});
  u.requires_grad_(true);
  sum(max(u, 1).first).backward();
  EXPECT_EQ(u.grad().to_vector<double>(), (std::vector<double>{0, 1, 0, 0}));
}

TEST(ReduceGrad, VarStd) {
  for (bool unbiased : {true, false}) {
    gradcheck_dims(fmt::format("var unbiased {}", unbiased),
                   [=](const Tensor& x, const Shape& d, bool k) { return var(x, d, unbiased, k); });
    gradcheck_dims(fmt::format("std unbiased {}", unbiased),
                   [=](const Tensor& x, const Shape& d, bool k) { return std(x, d, unbiased, k); });
  }
  // std at zero variance: PyTorch's gradient is 0, not NaN.
  Tensor c = full({4}, 2.0, {.dtype = kF64});
  c.requires_grad_(true);
  std(c).backward();
  EXPECT_EQ(c.grad().to_vector<double>(), (std::vector<double>{0, 0, 0, 0}));
  // One element: unbiased var divides by zero (NaN), like torch.
  EXPECT_TRUE(std::isnan(var(ones({1})).item<float>()));
  EXPECT_FLOAT_EQ(var(ones({1}), false).item<float>(), 0.0f);
}

TEST(ReduceGrad, Norm) {
  for (double p : {1.0, 2.0, 3.0, 1.5, double(INFINITY), -double(INFINITY)})
    gradcheck_dims(fmt::format("norm p={}", p), [=](const Tensor& x, const Shape& d, bool k) { return norm(x, p, d, k); });
  // p < 1 needs no zeros; p = 0 counts and has zero gradient.
  gradcheck_dims("norm p=0.5", [](const Tensor& x, const Shape& d, bool k) { return norm(x, 0.5, d, k); }, 0.2, 1);
  gradcheck_unary("norm p=0", [](const Tensor& x) { return norm(x, 0.0); }, {3, 4}, 50);
  // At x = 0 the 2-norm's gradient is 0, not NaN.
  Tensor z = zeros({3}, {.dtype = kF64});
  z.requires_grad_(true);
  norm(z).backward();
  EXPECT_EQ(z.grad().to_vector<double>(), (std::vector<double>{0, 0, 0}));
}

TEST(ReduceGrad, LogsumexpCumsum) {
  gradcheck_dims("logsumexp", [](const Tensor& x, const Shape& d, bool k) { return logsumexp(x, d, k); }, -3, 3);
  for (const Shape& s : kGradShapes)
    for (int64_t d = -1; d < int64_t(s.size()); ++d)
      gradcheck_unary(fmt::format("cumsum dim {}", d), [=](const Tensor& x) { return cumsum(x, d); }, s, 60);
}

TEST(ReduceGrad, SecondOrder) {
  // The vjps are differentiable: the gradient of sum(g * dL/dx) matches finite differences.
  auto second = [](const std::function<Tensor(const Tensor&)>& f) {
    return [f](const std::vector<Tensor>& in) {
      TensorFn loss = [f](const std::vector<Tensor>& xs) {
        Tensor y = f(xs[0]);
        return sum(y * y);
      };
      return kiln::grad(loss, {in[0]})[0];
    };
  };
  for (auto& [what, f] : std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>>{
           {"var", [](const Tensor& x) { return var(x, {1}); }},
           {"logsumexp", [](const Tensor& x) { return logsumexp(x, {1}); }},
           {"norm", [](const Tensor& x) { return norm(x, 2.0, {0}); }},
           {"prod", [](const Tensor& x) { return prod(x, 1); }},
           {"cumsum", [](const Tensor& x) { return cumsum(x, 1); }}}) {
    SCOPED_TRACE(what);
    EXPECT_GRADCHECK(second(f), {leaf({3, 4}, 70, 0.5, 1.5)});
  }
}

// ---------------------------------------------------------------------------
// Dtypes, empty tensors, scalars
// ---------------------------------------------------------------------------

TEST(ReduceDtypes, OutputDtypes) {
  EXPECT_EQ(sum(ones({3}, {.dtype = kBool})).dtype(), kI64);
  EXPECT_EQ(sum(ones({3}, {.dtype = kU8})).item<int64_t>(), 3);
  EXPECT_EQ(sum(ones({3}, {.dtype = kI32}), {0}).dtype(), kI64);
  EXPECT_EQ(sum(ones({3}, {.dtype = kBF16})).dtype(), kBF16);
  EXPECT_EQ(prod(full({3}, 2, {.dtype = kI32})).dtype(), kI64);
  EXPECT_EQ(cumsum(ones({3}, {.dtype = kBool}), 0).dtype(), kI64);
  EXPECT_EQ(amax(ones({3}, {.dtype = kI32}), {0}).dtype(), kI32);
  EXPECT_EQ(max(ones({2, 3}, {.dtype = kU8}), 1).second.dtype(), kI64);
  EXPECT_EQ(any(zeros({2})).dtype(), kBool);
  // An explicit dtype: f32 input summed in f64, integers into f32.
  Tensor x = full({1000}, 0.1f);
  Tensor s64 = sum(x, {0}, false, kF64);
  EXPECT_EQ(s64.dtype(), kF64);
  EXPECT_NEAR(s64.item<double>(), 1000 * double(0.1f), 1e-9);
  EXPECT_EQ(sum(arange(0, 5), {}, false, kF32).dtype(), kF32);
  EXPECT_EQ(sum(arange(0, 5), {}, false, kI32).item<int32_t>(), 10);
  EXPECT_EQ(logsumexp(zeros({2}, {.dtype = kI64}), {0}).dtype(), kF32);
}

TEST(ReduceEmpty, LikePyTorch) {
  Tensor e = zeros({0, 3});
  EXPECT_EQ(sum(e).item<float>(), 0.0f);
  EXPECT_TRUE(equal(sum(e, {0}), zeros({3})));
  EXPECT_EQ(sum(e, {1}).shape(), (Shape{0}));
  EXPECT_TRUE(std::isnan(mean(e).item<float>()));
  EXPECT_EQ(prod(e).item<float>(), 1.0f);
  EXPECT_TRUE(all(e).item<bool>());
  EXPECT_FALSE(any(e).item<bool>());
  EXPECT_EQ(norm(e).item<float>(), 0.0f);
  EXPECT_EQ(logsumexp(e, {0}).to_vector<float>(), (std::vector<float>(3, -INFINITY)));
  EXPECT_EQ(amax(e, {1}).shape(), (Shape{0}));
  EXPECT_EQ(max(e, 1).second.shape(), (Shape{0}));
  EXPECT_EQ(cumsum(e, 0).shape(), (Shape{0, 3}));
  // Scalars reduce over "their" dim 0.
  Tensor s = full({}, 4.0f);
  EXPECT_EQ(sum(s, {0}).item<float>(), 4.0f);
  EXPECT_EQ(max(s, 0).second.item<int64_t>(), 0);
  EXPECT_EQ(cumsum(s, -1).item<float>(), 4.0f);
  EXPECT_EQ(max(s).item<float>(), 4.0f);
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

TEST(ReduceErrors, Messages) {
  Tensor x = ones({2, 3});
  EXPECT_KILN_ERROR(sum(x, {2}), "[sum] dim 2 out of range");
  EXPECT_KILN_ERROR(mean(x, {-3}), "[mean] dim -3 out of range");
  EXPECT_KILN_ERROR(sum(x, {1, -1}), "[sum] dim 1 appears multiple times in the list of dims [1, -1]");
  EXPECT_KILN_ERROR(amax(x, {0, 0}), "[amax] dim 0 appears multiple times");
  EXPECT_KILN_ERROR(max(x, 5), "[max] dim 5 out of range");
  EXPECT_KILN_ERROR(cumsum(x, 2), "[cumsum] dim 2 out of range");
  EXPECT_KILN_ERROR(prod(x, -3), "[prod] dim -3 out of range");
  EXPECT_KILN_ERROR(mean(ones({3}, {.dtype = kI64})), "[mean] could not infer output dtype: input dtype i64 is integral");
  EXPECT_KILN_ERROR(var(ones({3}, {.dtype = kI32})), "[var] expects a floating input, got i32 [3]");
  EXPECT_KILN_ERROR(norm(ones({3}, {.dtype = kI32})), "[norm] expects a floating input, got i32");
  Tensor e = zeros({0, 3});
  EXPECT_KILN_ERROR(max(e), "[max] cannot reduce the empty input [0, 3]");
  EXPECT_KILN_ERROR(min(e), "[min] cannot reduce the empty input [0, 3]");
  EXPECT_KILN_ERROR(argmax(e), "[argmax] cannot reduce the empty input [0, 3]");
  EXPECT_KILN_ERROR(max(e, 0), "[max] cannot reduce dim 0 of size 0 of input [0, 3]");
  EXPECT_KILN_ERROR(argmin(e, 0), "[argmin] cannot reduce dim 0 of size 0");
  EXPECT_KILN_ERROR(amax(e, {}), "[amax] cannot reduce dim 0 of size 0");
  EXPECT_KILN_ERROR(norm(e, -INFINITY, {0}), "[norm] cannot reduce dim 0 of size 0");
  EXPECT_KILN_ERROR(sum(Tensor()), "[sum] input is an undefined tensor");
}

}  // namespace
}  // namespace kiln
