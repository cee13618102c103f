// Tests of softmax, log_softmax and logsumexp's kernel: PyTorch goldens, the
// fused row kernels against backend::cpu::ref over dims, layouts and dtypes, the
// vectorizable exp against std::exp, stability at extreme values, gradchecks
// in f64 (first and second order) and error messages.
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "src/backend/cpu/reduce/reduce.h"
#include "src/backend/cpu/vec_math.h"
#include "tests/support/ops_devices.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;

TEST(SoftmaxGolden, MatchesPyTorch) {
  const std::map<std::string, std::function<Tensor(const Tensor&)>> fns = {
      {"softmax_0", [](const Tensor& x) { return softmax(x, 0); }},
      {"softmax_1", [](const Tensor& x) { return softmax(x, 1); }},
      {"softmax_neg1", [](const Tensor& x) { return softmax(x, -1); }},
      {"log_softmax_0", [](const Tensor& x) { return log_softmax(x, 0); }},
      {"log_softmax_1", [](const Tensor& x) { return log_softmax(x, 1); }},
      {"log_softmax_2", [](const Tensor& x) { return log_softmax(x, 2); }},
      {"softmax_masked_1", [](const Tensor& x) { return softmax(x, 1); }},
      {"log_softmax_masked_1", [](const Tensor& x) { return log_softmax(x, 1); }},
  };
  const auto& j = golden("reduce_softmax");
  for_each_device([&](Device d) {
  size_t seen = 0;
  for (const auto& c : j.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE(name);
    auto it = fns.find(name);
    ASSERT_NE(it, fns.end()) << "no kiln call for golden case " << name;
    ++seen;
    Tensor x = golden_tensor(j.at("inputs").at(c.at("x").get<std::string>()));
    Tensor want = golden_tensor(c.at("out")[0]);
    EXPECT_TRUE(all_close(to(it->second(to(x, d)), kCPU), want, 1e-5, 1e-6));
    EXPECT_TRUE(all_close(to(it->second(to(noncontiguous(x), d)), kCPU), want, 1e-5, 1e-6)) << "non-contiguous";
  }
  EXPECT_EQ(seen, fns.size());
  });
}

// The same values in a layout with no stride-1 dim.
Tensor strided(const Tensor& x) {
  NoGradGuard no_grad;
  Shape s = x.shape();
  s[s.size() - 1] *= 2;
  Tensor v = zeros(s, {.dtype = x.dtype()}).slice(-1, 0, s.back(), 2);
  copy_(v, x);
  return v;
}

TEST(SoftmaxKernels, FastMatchesRef) {
  for_each_kernel_isa([&](KernelIsa) {
    const std::vector<Shape> shapes = {{7, 13, 5}, {64, 1000}, {3, 20001}, {2, 3, 17, 4}, {1}, {4, 0}, {}};
    uint64_t seed = 0;
    for (const Shape& s : shapes)
      for (int64_t dim = 0; dim < std::max<int64_t>(int64_t(s.size()), 1); ++dim)
        for (int layout = 0; layout < 3; ++layout)
          for (DType t : {kF32, kF64, kBF16}) {
            SCOPED_TRACE(fmt::format("shape {} dim {} layout {} dtype {}", to_string(s), dim, layout, name(t)));
            Generator gen(++seed);
            Tensor x = to(mul(randn(s, gen), 4.0), t);
            if (layout == 1) x = noncontiguous(x);
            if (layout == 2 && x.dim() > 0) x = strided(x);
            const double tol = t == kBF16 ? 1e-2 : t == kF32 ? 2e-6 : 1e-13;
            for (bool log : {false, true}) {
              Tensor a = Tensor::empty(s, t), b = Tensor::empty(s, t);
              backend::cpu::softmax(x, dim, a, log);
              backend::cpu::ref::softmax(x, dim, b, log);
              EXPECT_TRUE(all_close(a, b, tol, tol)) << (log ? "log_softmax" : "softmax");
            }
            Shape r = s;
            if (!r.empty()) r.erase(size_t(dim));
            Tensor a = Tensor::empty(r, t), b = Tensor::empty(r, t);
            backend::cpu::logsumexp(x, dim, a);
            backend::cpu::ref::logsumexp(x, dim, b);
            EXPECT_TRUE(all_close(a, b, tol, tol)) << "logsumexp";
          }
  });
}

TEST(SoftmaxKernels, VectorExpMatchesStdExp) {
  // Every 997th float bit pattern over [-104, 89], relative error <= 2 ulp (or exact 0 / subnormal).
  int64_t checked = 0;
  for (float x = -104.0f; x < 89.0f; x = std::nextafter(x, 100.0f) + std::abs(x) * 1e-4f + 1e-6f) {
    float got = backend::cpu::exp_f32(x), want = std::exp(x);
    if (want < std::numeric_limits<float>::min()) {
      ASSERT_NEAR(got, want, 2e-45f) << "x = " << x;
    } else if (std::isinf(want)) {
      ASSERT_TRUE(std::isinf(got)) << "x = " << x;
    } else {
      ASSERT_LE(std::abs(got - want), 2.5e-7f * want) << "x = " << x;
    }
    ++checked;
  }
  EXPECT_GT(checked, 100000);
  EXPECT_EQ(backend::cpu::exp_f32(-INFINITY), 0.0f);
  EXPECT_EQ(backend::cpu::exp_f32(INFINITY), INFINITY);
  EXPECT_EQ(backend::cpu::exp_f32(0.0f), 1.0f);
  EXPECT_EQ(backend::cpu::exp_f32(-200.0f), 0.0f);
  EXPECT_TRUE(std::isnan(backend::cpu::exp_f32(NAN)));
}

TEST(Softmax, StableAndNormalised) {
  // Huge logits neither overflow nor lose the small ones.
  Tensor x = tensor<float>({1000, 1001, 1002, -1000}, {1, 4});
  Tensor p = softmax(x, 1);
  EXPECT_TRUE(all_close(p, tensor<float>({0.09003057f, 0.24472847f, 0.66524096f, 0.0f}, {1, 4}), 1e-5, 1e-7));
  Tensor lp = log_softmax(x, 1);
  EXPECT_TRUE(all_close(lp, tensor<float>({-2.40760596f, -1.40760596f, -0.40760596f, -2002.40760596f}, {1, 4})));
  // Rows sum to 1 along any dim.
  Generator gen(3);
  Tensor y = mul(randn({4, 5, 6}, gen), 10.0);
  for (int64_t d = 0; d < 3; ++d)
    EXPECT_TRUE(all_close(sum(softmax(y, d), {d}), ones(sum(y, {d}).shape()), 1e-5, 1e-6)) << "dim " << d;
  // A scalar's softmax is 1 and its log_softmax 0.
  EXPECT_EQ(softmax(full({}, 3.0f), 0).item<float>(), 1.0f);
  EXPECT_EQ(log_softmax(full({}, 3.0f), -1).item<float>(), 0.0f);
  // An empty dim gives an empty result.
  EXPECT_EQ(softmax(zeros({3, 0}), 1).shape(), (Shape{3, 0}));
}

void gradcheck_softmax(const char* what, Tensor (*f)(const Tensor&, int64_t)) {
  uint64_t seed = 10;
  for (const Shape& s : std::vector<Shape>{{5}, {3, 4}, {2, 3, 4}})
    for (int64_t d = -1; d < int64_t(s.size()); ++d)
      for (bool nc : {false, true}) {
        SCOPED_TRACE(fmt::format("{} shape {} dim {}{}", what, to_string(s), d, nc ? " non-contiguous" : ""));
        Tensor x = leaf(s, ++seed, -2, 2);
        if (nc) x = noncontiguous(x);
        EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return f(in[0], d); }, {x});
      }
}

TEST(SoftmaxGrad, FirstOrder) {
  gradcheck_softmax("softmax", [](const Tensor& x, int64_t d) { return softmax(x, d); });
  gradcheck_softmax("log_softmax", [](const Tensor& x, int64_t d) { return log_softmax(x, d); });
}

TEST(SoftmaxGrad, SecondOrder) {
  for (bool log : {false, true}) {
    SCOPED_TRACE(log ? "log_softmax" : "softmax");
    TensorFn outer = [log](const std::vector<Tensor>& in) {
      TensorFn loss = [log](const std::vector<Tensor>& xs) {
        Tensor y = log ? log_softmax(xs[0], 1) : softmax(xs[0], 1);
        return sum(y * y);
      };
      return kiln::grad(loss, {in[0]})[0];
    };
    EXPECT_GRADCHECK(outer, {leaf({3, 4}, 99, -2, 2)});
  }
}

TEST(SoftmaxErrors, Messages) {
  EXPECT_KILN_ERROR(softmax(ones({2, 3}, {.dtype = kI64}), 1), "[softmax] expects a floating input, got i64 [2, 3]");
  EXPECT_KILN_ERROR(log_softmax(ones({2, 3}), 2), "[log_softmax] dim 2 out of range");
  EXPECT_KILN_ERROR(softmax(ones({2, 3}), -3), "[softmax] dim -3 out of range");
  EXPECT_KILN_ERROR(softmax(Tensor(), 0), "[softmax] input is an undefined tensor");
}

}  // namespace
}  // namespace kiln
