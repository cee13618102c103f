// Tests of the unary ops and activations of kiln/ops/unary.h: PyTorch goldens
// (f32, special values, integer/f64/bf16 inputs), the fast kernels against
// backend::cpu::ref on awkward layouts, gradchecks in f64 away from kinks, in-place
// forms and error messages.
#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>

#include "src/backend/cpu/elementwise/elementwise.h"
#include "src/backend/cpu/elementwise/elementwise_math.h"
#include "tests/support/ops_devices.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;

// ---------------------------------------------------------------------------
// Goldens
// ---------------------------------------------------------------------------

using Op = std::function<Tensor(const Tensor&, const std::vector<double>&)>;

const std::map<std::string, Op>& unary_ops() {
  static const std::map<std::string, Op> ops = {
      {"neg", [](auto& x, auto&) { return neg(x); }},
      {"abs", [](auto& x, auto&) { return abs(x); }},
      {"exp", [](auto& x, auto&) { return exp(x); }},
      {"log", [](auto& x, auto&) { return log(x); }},
      {"log1p", [](auto& x, auto&) { return log1p(x); }},
      {"expm1", [](auto& x, auto&) { return expm1(x); }},
      {"sqrt", [](auto& x, auto&) { return sqrt(x); }},
      {"rsqrt", [](auto& x, auto&) { return rsqrt(x); }},
      {"square", [](auto& x, auto&) { return square(x); }},
      {"reciprocal", [](auto& x, auto&) { return reciprocal(x); }},
      {"sin", [](auto& x, auto&) { return sin(x); }},
      {"cos", [](auto& x, auto&) { return cos(x); }},
      {"tanh", [](auto& x, auto&) { return tanh(x); }},
      {"sigmoid", [](auto& x, auto&) { return sigmoid(x); }},
      {"erf", [](auto& x, auto&) { return erf(x); }},
      {"relu", [](auto& x, auto&) { return relu(x); }},
      {"gelu", [](auto& x, auto&) { return gelu(x); }},
      {"gelu_tanh", [](auto& x, auto&) { return gelu(x, GeluApproximation::tanh); }},
      {"silu", [](auto& x, auto&) { return silu(x); }},
      {"softplus", [](auto& x, auto&) { return softplus(x); }},
      {"softplus_bt", [](auto& x, auto& p) { return softplus(x, p[0], p[1]); }},
      {"leaky_relu", [](auto& x, auto& p) { return leaky_relu(x, p[0]); }},
      {"sign", [](auto& x, auto&) { return sign(x); }},
      {"floor", [](auto& x, auto&) { return floor(x); }},
      {"ceil", [](auto& x, auto&) { return ceil(x); }},
      {"round", [](auto& x, auto&) { return round(x); }},
      {"clamp_min", [](auto& x, auto& p) { return clamp_min(x, p[0]); }},
      {"clamp_max", [](auto& x, auto& p) { return clamp_max(x, p[0]); }},
  };
  return ops;
}

TEST(UnaryGolden, MatchesTorch) {
  for_each_device([](Device d) {
  const auto& file = golden("elementwise_unary");
  int n = 0;
  for (const auto& c : file.at("cases")) {
    std::string op = c.at("op");
    const auto& args = c.at("args");
    Tensor x = golden_tensor(file.at("inputs").at(args[0].get<std::string>()));
    Tensor want = golden_tensor(c.at("out"));
    std::vector<double> p;
    std::vector<Scalar> ps;  // the numbers with their kind, for clamp
    for (size_t i = 1; i < args.size(); ++i) {
      p.push_back(args[i].get<double>());
      ps.push_back(args[i].is_number_integer() ? Scalar(args[i].get<int64_t>()) : Scalar(args[i].get<double>()));
    }
    // Transcendentals in f32 may differ from torch's vectorized versions by an ulp or two.
    double rtol = want.dtype() == kBF16 ? 1e-2 : want.dtype() == kF64 ? 1e-12 : 4e-6;
    for (bool nc : {false, true}) {
      Tensor in = to(nc ? noncontiguous(x) : x, d);
      Tensor got;
      if (op == "clamp") got = clamp(in, ps[0], ps[1]);
      else if (op == "clamp_min") got = clamp_min(in, ps[0]);
      else if (op == "clamp_max") got = clamp_max(in, ps[0]);
      else {
        auto it = unary_ops().find(op);
        ASSERT_NE(it, unary_ops().end()) << "no kiln op for golden case " << op;
        got = it->second(in, p);
      }
      EXPECT_EQ(got.device(), d) << op;
      EXPECT_EQ(got.dtype(), want.dtype()) << op << " " << args.dump();
      EXPECT_TRUE(all_close(to(got, kCPU), want, rtol, 1e-6)) << op << " " << args.dump() << (nc ? " (non-contiguous)" : "");
    }
    ++n;
  }
  EXPECT_GT(n, 50);
  });
}

TEST(Unary, RoundIsHalfToEvenAndIntegersKeepDtype) {
  EXPECT_TRUE(equal(round(tensor<float>({-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f})),
                    tensor<float>({-2, -2, -0.f, 0, 2, 2})));
  Tensor i = tensor<int64_t>({-3, 0, 4});
  EXPECT_EQ(abs(i).dtype(), kI64);
  EXPECT_EQ(relu(i).dtype(), kI64);
  EXPECT_EQ(clamp(i, 0, 2).dtype(), kI64);
  EXPECT_EQ(clamp(i, 0.5, 2).dtype(), kF32);
  EXPECT_EQ(exp(i).dtype(), kF32);
  EXPECT_EQ(gelu(to(i, kI32)).dtype(), kF32);
  EXPECT_EQ(sign(tensor<int32_t>({-7, 0, 9})).dtype(), kI32);
  EXPECT_TRUE(equal(sign(tensor<int32_t>({-7, 0, 9})), tensor<int32_t>({-1, 0, 1})));
}

TEST(Unary, SoftplusThresholdAndClampOrder) {
  // Above threshold softplus is the identity; below it log1p(exp(beta x)) / beta.
  Tensor x = tensor<double>({-1, 0.5, 30});
  Tensor y = softplus(x, 2.0, 20.0);
  EXPECT_NEAR(y[0].item<double>(), std::log1p(std::exp(-2.0)) / 2, 1e-15);
  EXPECT_NEAR(y[1].item<double>(), std::log1p(std::exp(1.0)) / 2, 1e-15);
  EXPECT_EQ(y[2].item<double>(), 30.0);
  // min > max: everything becomes max (like torch).
  EXPECT_TRUE(equal(clamp(tensor<float>({-5, 0, 5}), 2, 1), tensor<float>({1, 1, 1})));
  EXPECT_TRUE(isnan(clamp(tensor<float>({NAN}), 0, 1)).item<bool>());
}

// ---------------------------------------------------------------------------
// Fast kernels against the ref loops
// ---------------------------------------------------------------------------

Tensor random_of(const Shape& shape, DType t, uint64_t seed) {
  Generator gen(seed);
  if (t == kBool) return gt(rand(shape, gen), 0.5);
  if (!is_floating(t)) return to(randint(-6, 7, shape, gen), t);
  Tensor x = mul(sub(rand(shape, gen, {.dtype = kF64}), 0.5), 8.0);
  return to(where(lt(abs(x), 0.3), round(x), x), t);
}

/// Fast and ref loops run the same functors, but a vectorized loop may fuse
/// multiply-adds differently from a scalar one: floating results may differ
/// by an ulp or so, everything else must be identical.
::testing::AssertionResult same_result(const Tensor& fast, const Tensor& ref) {
  if (!is_floating(fast.dtype())) return equal(fast, ref);
  return all_close(fast, ref, fast.dtype() == kBF16 ? 1e-2 : 1e-5, 1e-6);
}

bool float_only(backend::cpu::UnaryOp op) { return op >= backend::cpu::UnaryOp::exp && op <= backend::cpu::UnaryOp::leaky_relu; }

std::vector<std::pair<const char*, std::function<Tensor(DType, uint64_t)>>> layouts() {
  return {
      {"contiguous", [](DType t, uint64_t s) { return random_of({4, 5}, t, s); }},
      {"scalar", [](DType t, uint64_t s) { return random_of({}, t, s); }},
      {"transposed", [](DType t, uint64_t s) { return transpose(random_of({3, 4, 5}, t, s), 0, 2); }},
      {"stepped", [](DType t, uint64_t s) { return slice(random_of({5, 11}, t, s), 1, 1, 11, 3); }},
      {"expanded", [](DType t, uint64_t s) { return expand(random_of({3, 1}, t, s), {3, 6}); }},
      {"large", [](DType t, uint64_t s) { return random_of({40000, 2}, t, s); }},
  };
}

TEST(UnaryKernel, FastMatchesRefForEveryOp) {
  for_each_kernel_isa([&](KernelIsa) {
    for (int k = 0; k < backend::cpu::kNumUnaryOps; ++k) {
      auto op = backend::cpu::UnaryOp(k);
      backend::cpu::OpParams p = op == backend::cpu::UnaryOp::softplus ? backend::cpu::OpParams{1.5, 2.0}
                        : op == backend::cpu::UnaryOp::leaky_relu ? backend::cpu::OpParams{0.2, 0}
                                                         : backend::cpu::OpParams{};
      for (DType t : {kF32, kF64, kBF16, kI64, kI32, kU8, kBool}) {
        if (float_only(op) && !is_floating(t)) continue;
        for (const auto& [lname, make] : layouts()) {
          if (std::string(lname) == "large" && t != kF32) continue;  // chunking does not depend on dtype
          Tensor x = make(t, 30 + k);
          DType ot = backend::cpu::is_predicate(op) ? kBool : t;
          Tensor fast = empty(x.shape(), {.dtype = ot}), slow = empty(x.shape(), {.dtype = ot});
          backend::cpu::unary(op, fast, x, p);
          backend::cpu::ref::unary(op, slow, x, p);
          EXPECT_TRUE(same_result(fast, slow)) << "unary op #" << k << " " << name(t) << " " << lname;
        }
      }
    }
  });
}

TEST(UnaryKernel, ClampFastMatchesRef) {
  for_each_kernel_isa([&](KernelIsa) {
    for (DType t : {kF32, kF64, kBF16, kI64, kU8}) {
      for (const auto& [lname, make] : layouts()) {
        Tensor x = make(t, 3);
        for (auto [lo, hi] : {std::pair<std::optional<Scalar>, std::optional<Scalar>>{-1, 2},
                              {std::nullopt, 1}, {0, std::nullopt}, {3, -3}}) {
          Tensor fast = empty(x.shape(), {.dtype = t}), slow = empty(x.shape(), {.dtype = t});
          backend::cpu::clamp(fast, x, lo, hi);
          backend::cpu::ref::clamp(slow, x, lo, hi);
          EXPECT_TRUE(same_result(fast, slow)) << name(t) << " " << lname;
        }
      }
    }
  });
}

// Distance in units in the last place between two floats.
int64_t ulps(float a, float b) {
  if (a == b) return 0;
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INT64_MAX;
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = INT32_MIN - ia;  // map to a monotonic integer line
  if (ib < 0) ib = INT32_MIN - ib;
  return std::abs(int64_t(ia) - int64_t(ib));
}

TEST(UnaryKernel, VectorizedF32MathWithinAFewUlp) {
  // f32 exp/log/log1p/tanh/sigmoid/silu/erf/gelu/softplus use branch-free approximations; check them
  // against the f64 functions rounded to f32 on a dense grid and at the edges.
  std::vector<float> xs;
  for (float x = -30.0f; x <= 30.0f; x += 0.00731f) xs.push_back(x);
  for (float x = -1e-3f; x <= 1e-3f; x += 1.3e-6f) xs.push_back(x);
  for (float x = 1e-6f; x < 3e38f; x *= 1.37f) xs.push_back(x);  // log over the whole range
  for (float x : {1e-40f, 3e-45f, FLT_MAX, -1.0f + 1e-7f, -1.0f, -1.5f, 0.0f, -0.0f, 1e-30f, -1e-30f, 0.625f, -0.625f, 87.0f, 88.7f, -87.0f, -103.0f, INFINITY, -INFINITY, NAN})
    xs.push_back(x);
  Tensor x32 = tensor<float>(xs);
  Tensor x64 = to(x32, kF64);
  struct Case {
    const char* name;
    Tensor (*f)(const Tensor&);
    int64_t max_ulp;
  };
  for (Case c : {Case{"exp", [](const Tensor& t) { return exp(t); }, 2},
                 Case{"tanh", [](const Tensor& t) { return tanh(t); }, 3},
                 Case{"sigmoid", [](const Tensor& t) { return sigmoid(t); }, 3},
                 Case{"silu", [](const Tensor& t) { return silu(t); }, 4},
                 Case{"erf", [](const Tensor& t) { return erf(t); }, 2},
                 Case{"log", [](const Tensor& t) { return log(t); }, 2},
                 Case{"log1p", [](const Tensor& t) { return log1p(t); }, 3},
                 Case{"softplus", [](const Tensor& t) { return softplus(t); }, 4},
                 Case{"gelu", [](const Tensor& t) { return gelu(t); }, 8}}) {
    auto got = c.f(x32).to_vector<float>();
    auto want = to(c.f(x64), kF32).to_vector<float>();
    int64_t worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      // Near FLT_MIN intermediates go subnormal and lose digits: any tiny value will do.
      if (std::abs(want[i]) < 1e-30f && std::abs(got[i]) < 1e-30f) continue;
      int64_t u = ulps(got[i], want[i]);
      if (u > worst) worst = u, at = i;
    }
    EXPECT_LE(worst, c.max_ulp) << c.name << " at x = " << xs[at] << ": " << got[at] << " vs " << want[at];
  }
}

TEST(UnaryKernel, GeluTanhF32WithinItsConditioning) {
  // f32 gelu_tanh is x / (1 + e^(-v)), v = 2 sqrt(2/pi) (x + 0.044715 x^3)
  // (src/backend/cpu/elementwise/elementwise_ops.h): each of the few
  // roundings in v (relative 2^-24) becomes an absolute error in v and so a
  // relative one in e^(-v), up to about |v| ulp each; no f32 formula that
  // computes v does better for x < 0 (the tanh form rounded to 0 from x = -9
  // on). So the bound is a few ulp plus 4 |v|. The derivative the same way,
  // away from its zero near x = -0.75 (cancellation).
  std::vector<float> xs;
  for (float x = -12.0f; x <= 12.0f; x += 0.00531f) xs.push_back(x);
  for (float x : {0.0f, -0.0f, 1e-30f, -1e-30f, 30.0f, 1e4f, INFINITY}) xs.push_back(x);
  Tensor x32 = tensor<float>(xs), x64 = to(x32, kF64);
  auto got = gelu(x32, GeluApproximation::tanh).to_vector<float>();
  auto want = to(gelu(x64, GeluApproximation::tanh), kF32).to_vector<float>();
  Tensor xg32 = x32.detach().requires_grad_(), xg64 = x64.detach().requires_grad_();
  gelu(xg32, GeluApproximation::tanh).backward(ones_like(xg32));
  gelu(xg64, GeluApproximation::tanh).backward(ones_like(xg64));
  auto dgot = xg32.grad().to_vector<float>();
  auto dwant = to(xg64.grad(), kF32).to_vector<float>();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i], v = std::fabs(2 * 0.7978845608 * (x + 0.044715 * x * x * x));
    const int64_t bound = 4 + int64_t(4 * std::min(v, 1e6));
    if (std::fabs(want[i]) < 1e-30f && std::fabs(got[i]) < 1e-30f) continue;  // deep tail: any tiny value
    if (std::fabs(dwant[i]) < 1e-30f && std::fabs(dgot[i]) < 1e-30f) continue;
    EXPECT_LE(ulps(got[i], want[i]), bound) << "x = " << x << ": " << got[i] << " vs " << want[i];
    if (std::fabs(x + 0.7517916) > 0.05)
      EXPECT_LE(ulps(dgot[i], dwant[i]), 2 * bound + 8) << "grad at x = " << x << ": " << dgot[i] << " vs " << dwant[i];
  }
}

TEST(UnaryKernel, GeluBackwardF32SharesOneExpBitForBit) {
  for_each_kernel_isa([&](KernelIsa) {
    // The f32 GELU derivative computes e^(-x^2 / 2) once for Phi and phi
    // (math::gelu_grad_f32); it must equal the two-exponential formula
    // normal_cdf(x) + x exp(-0.5 x x) / sqrt(2 pi) bit for bit, including where
    // erfc's exponent is clamped (|x| near 14.14) and at the special values.
    std::vector<float> xs;
    for (float x = -20.0f; x <= 20.0f; x += 0.000917f) xs.push_back(x);
    for (float x = 14.0f; x <= 14.3f; x += 1e-5f) xs.push_back(-x), xs.push_back(x);
    for (float x : {1e-40f, -3e-45f, 1e-19f, -1e-19f, FLT_MAX, -FLT_MAX, 0.0f, -0.0f, 0.84f, -0.84f, INFINITY, -INFINITY, NAN})
      xs.push_back(x);
    Tensor x = tensor<float>(xs).requires_grad_();
    std::vector<float> gs(xs.size());
    for (size_t i = 0; i < gs.size(); ++i) gs[i] = 0.5f + float(i % 7) * 0.25f;
    gelu(x).backward(tensor<float>(gs));
    auto got = x.grad().to_vector<float>();
    int64_t bad = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const float v = xs[i];
      const float cdf = backend::cpu::math::normal_cdf_f32(v);
      const float pdf = backend::cpu::exp_f32(-0.5f * v * v) * float(0.39894228040143267794);
      const float want = gs[i] * (cdf + v * pdf);
      if (std::memcmp(&got[i], &want, 4) != 0 && !(std::isnan(got[i]) && std::isnan(want))) {
        if (bad++ < 3) ADD_FAILURE() << "x = " << v << ": " << got[i] << " vs " << want;
      }
    }
    EXPECT_EQ(bad, 0);
  });
}

// ---------------------------------------------------------------------------
// Gradchecks (f64)
// ---------------------------------------------------------------------------

/// Moves every element of the leaf x at least `gap` away from each point.
Tensor away_from(Tensor x, std::vector<double> points, double gap = 0.05) {
  NoGradGuard g;
  double* p = x.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i)
    for (double c : points)
      if (std::abs(p[i] - c) < gap) p[i] = p[i] >= c ? c + gap : c - gap;
  return x;
}

const std::vector<Shape> kShapes = {{}, {5}, {3, 4}, {2, 3, 4}};

template <class F>
void gradcheck_unary(const char* what, F f, double lo = -2, double hi = 2, std::vector<double> kinks = {}) {
  uint64_t seed = 200;
  for (const Shape& s : kShapes) {
    Tensor x = away_from(leaf(s, ++seed, lo, hi), kinks);
    auto fn = [&](const std::vector<Tensor>& in) { return f(in[0]); };
    EXPECT_GRADCHECK(fn, {x});
    EXPECT_GRADCHECK(fn, {noncontiguous(x)});
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << what << " shape " << to_string(s);
      return;
    }
  }
}

TEST(UnaryGrad, Math) {
  gradcheck_unary("neg", [](const Tensor& x) { return neg(x); });
  gradcheck_unary("abs", [](const Tensor& x) { return abs(x); }, -2, 2, {0});
  gradcheck_unary("exp", [](const Tensor& x) { return exp(x); });
  gradcheck_unary("log", [](const Tensor& x) { return log(x); }, 0.2, 3);
  gradcheck_unary("log1p", [](const Tensor& x) { return log1p(x); }, -0.5, 3);
  gradcheck_unary("expm1", [](const Tensor& x) { return expm1(x); });
  gradcheck_unary("sqrt", [](const Tensor& x) { return sqrt(x); }, 0.2, 3);
  gradcheck_unary("rsqrt", [](const Tensor& x) { return rsqrt(x); }, 0.2, 3);
  gradcheck_unary("square", [](const Tensor& x) { return square(x); });
  gradcheck_unary("reciprocal", [](const Tensor& x) { return reciprocal(x); }, 0.3, 3);
  gradcheck_unary("sin", [](const Tensor& x) { return sin(x); });
  gradcheck_unary("cos", [](const Tensor& x) { return cos(x); });
  gradcheck_unary("erf", [](const Tensor& x) { return erf(x); });
}

TEST(UnaryGrad, Activations) {
  gradcheck_unary("tanh", [](const Tensor& x) { return tanh(x); });
  gradcheck_unary("sigmoid", [](const Tensor& x) { return sigmoid(x); });
  gradcheck_unary("relu", [](const Tensor& x) { return relu(x); }, -2, 2, {0});
  gradcheck_unary("gelu", [](const Tensor& x) { return gelu(x); }, -3, 3);
  gradcheck_unary("gelu tanh", [](const Tensor& x) { return gelu(x, GeluApproximation::tanh); }, -3, 3);
  gradcheck_unary("silu", [](const Tensor& x) { return silu(x); }, -3, 3);
  gradcheck_unary("softplus", [](const Tensor& x) { return softplus(x); }, -3, 3);
  gradcheck_unary("softplus beta threshold", [](const Tensor& x) { return softplus(x, 2.0, 1.0); }, -3, 3, {0.5});
  gradcheck_unary("leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.1); }, -2, 2, {0});
}

TEST(UnaryGrad, ClampAndZeroGradientOps) {
  gradcheck_unary("clamp", [](const Tensor& x) { return clamp(x, -0.5, 0.5); }, -1, 1, {-0.5, 0.5});
  gradcheck_unary("clamp_min", [](const Tensor& x) { return clamp_min(x, 0.25); }, -1, 1, {0.25});
  gradcheck_unary("clamp_max", [](const Tensor& x) { return clamp_max(x, 0.25); }, -1, 1, {0.25});
  // Gradient passes where min <= x <= max, boundaries included (like torch).
  Tensor x = tensor<double>({-1, 0, 0.5, 1, 2}).requires_grad_(true);
  sum(clamp(x, 0, 1)).backward();
  EXPECT_TRUE(equal(x.grad(), tensor<double>({0, 1, 1, 1, 0})));
  for (auto f : {+[](const Tensor& t) { return sign(t); }, +[](const Tensor& t) { return floor(t); },
                 +[](const Tensor& t) { return ceil(t); }, +[](const Tensor& t) { return round(t); }}) {
    Tensor y = leaf({4}, 3, -2, 2);
    Tensor out = f(y);
    EXPECT_TRUE(out.requires_grad());
    sum(out).backward();
    EXPECT_TRUE(equal(y.grad(), zeros({4}, {.dtype = kF64})));
  }
}

TEST(UnaryGrad, SecondOrderThroughFusedVjps) {
  // create_graph switches the fused backward kernels to differentiable formulas.
  auto second = [](Tensor (*f)(const Tensor&)) {
    return [f](const std::vector<Tensor>& x) {
      EnableGradGuard on;  // gradcheck evaluates under NoGradGuard
      auto g = grad({sum(f(x[0]))}, {x[0]}, {}, true, true);
      return g[0];
    };
  };
  std::vector<Tensor> in = {leaf({6}, 9, -2, 2)};
  EXPECT_GRADCHECK(second([](const Tensor& x) { return tanh(x); }), in);
  EXPECT_GRADCHECK(second([](const Tensor& x) { return sigmoid(x); }), in);
  EXPECT_GRADCHECK(second([](const Tensor& x) { return gelu(x); }), in);
  EXPECT_GRADCHECK(second([](const Tensor& x) { return gelu(x, GeluApproximation::tanh); }), in);
  EXPECT_GRADCHECK(second([](const Tensor& x) { return silu(x); }), in);
  EXPECT_GRADCHECK(second([](const Tensor& x) { return softplus(x); }), in);
  EXPECT_GRADCHECK(second([](const Tensor& x) { return exp(x); }), in);
  EXPECT_GRADCHECK(second([](const Tensor& x) { return sin(x); }), in);
  std::vector<Tensor> pos = {leaf({6}, 9, 0.5, 2)};
  EXPECT_GRADCHECK(second([](const Tensor& x) { return sqrt(x); }), pos);
  EXPECT_GRADCHECK(second([](const Tensor& x) { return rsqrt(x); }), pos);
  EXPECT_GRADCHECK(second([](const Tensor& x) { return log(x); }), pos);
}

TEST(UnaryGrad, FusedBackwardMatchesComposedFormulas) {
  // Without create_graph the fused kernels run; compare them with the
  // composed path at many points, in f32 and f64.
  for (DType t : {kF64, kF32}) {
    Tensor x = to(mul(sub(arange(0, 101, 1, {.dtype = kF64}), 50), 0.1), t).requires_grad_(true);
    for (auto f : {+[](const Tensor& v) { return gelu(v); },
                   +[](const Tensor& v) { return gelu(v, GeluApproximation::tanh); },
                   +[](const Tensor& v) { return silu(v); }, +[](const Tensor& v) { return softplus(v, 1.5, 2.0); },
                   +[](const Tensor& v) { return tanh(v); }, +[](const Tensor& v) { return sigmoid(v); },
                   +[](const Tensor& v) { return leaky_relu(v, 0.2); }}) {
      Tensor fused = grad({sum(f(x))}, {x})[0];
      Tensor composed = grad({sum(f(x))}, {x}, {}, true, /*create_graph=*/true)[0];
      EXPECT_TRUE(all_close(fused.detach(), composed.detach(), t == kF64 ? 1e-12 : 1e-5, 1e-6));
    }
  }
}

// ---------------------------------------------------------------------------
// In place
// ---------------------------------------------------------------------------

TEST(UnaryInplace, ValuesVersionsAndGradients) {
  Tensor x = tensor<float>({-1, 0.25f, 4});
  uint64_t v0 = x.storage()->version();
  relu_(x);
  EXPECT_TRUE(equal(x, tensor<float>({0, 0.25f, 4})));
  sqrt_(x);
  EXPECT_TRUE(equal(x, tensor<float>({0, 0.5f, 2})));
  neg_(x);
  clamp_(x, -1, std::nullopt);
  exp_(x);
  EXPECT_TRUE(all_close(x, exp(tensor<float>({0, -0.5f, -1}))));
  EXPECT_EQ(x.storage()->version(), v0 + 5);

  // Ops that save their output (relu_, sqrt_, exp_) must come last, as in torch.
  auto chain = [](Tensor (*last)(const Tensor&)) {
    return [last](const std::vector<Tensor>& in) {
      Tensor y = mul(in[0], 1.5);
      neg_(y);
      clamp_(y, -1.2, 0.9);
      add_(y, 0.5);
      return last(y);
    };
  };
  Tensor x0 = away_from(leaf({3, 4}, 4, -1, 1), {0.8, -0.6, 1.0 / 3});
  EXPECT_GRADCHECK(chain([](const Tensor& y) { return relu_(y); }), {x0});
  EXPECT_GRADCHECK(chain([](const Tensor& y) { return exp_(y); }), {x0});
  EXPECT_GRADCHECK(chain([](const Tensor& y) { return sqrt_(add_(y, 1.0)); }), {x0});
  Tensor y = mul(leaf({3}, 5), 2.0);
  relu_(y);
  add_(y, 1);
  EXPECT_KILN_ERROR(sum(y).backward(), "saved by 'relu_' was modified in place");
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

TEST(UnaryErrors, Messages) {
  EXPECT_KILN_ERROR(neg(tensor<bool>({true})), "[neg] negation of a bool tensor of shape [1] is not supported");
  EXPECT_KILN_ERROR(exp(Tensor()), "[exp] x is an undefined tensor");
  EXPECT_KILN_ERROR(clamp(zeros({2}), std::nullopt, std::nullopt), "[clamp] at least one of min and max must be given");
  EXPECT_KILN_ERROR(softplus(zeros({2}), 0.0), "[softplus] beta must be nonzero");
  Tensor i = tensor<int64_t>({1, 4});
  EXPECT_KILN_ERROR(sqrt_(i), "[sqrt_] result type f32 can't be cast to the desired output type i64");
  EXPECT_KILN_ERROR(clamp_(i, 0.5, 2), "[clamp_] result type f32 can't be cast to the desired output type i64");
  EXPECT_TRUE(equal(i, tensor<int64_t>({1, 4})));
  Tensor w = leaf({2}, 1);
  EXPECT_KILN_ERROR(relu_(w), "[relu_] a leaf tensor of shape [2] that requires grad cannot be modified in place");
  EXPECT_KILN_ERROR(exp_(expand(zeros({1}), {4})), "[exp_] more than one element of the written-to tensor");
}

}  // namespace
}  // namespace kiln
