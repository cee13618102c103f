// Tests of the binary elementwise ops of kiln/ops/binary.h: PyTorch goldens
// (promotion, broadcasting, scalar forms, comparisons, selection), the fast
// kernels against backend::cpu::ref on awkward layouts, in-place semantics, gradchecks
// in f64 and error messages.
#include <cmath>
#include <functional>
#include <map>

#include "src/backend/cpu/elementwise/elementwise.h"
#include "tests/support/ops_devices.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;

// ---------------------------------------------------------------------------
// Goldens: each case names its inputs (from elementwise_inputs) or gives numbers.
// ---------------------------------------------------------------------------

struct Arg {
  Tensor t;
  Scalar s;
};
using Op = std::function<Tensor(const std::vector<Arg>&)>;

const std::map<std::string, Op>& binary_ops() {
  static const std::map<std::string, Op> ops = {
      {"add", [](auto& a) { return add(a[0].t, a[1].t); }},
      {"add_alpha", [](auto& a) { return add(a[0].t, a[1].t, a[2].s); }},
      {"sub", [](auto& a) { return sub(a[0].t, a[1].t); }},
      {"mul", [](auto& a) { return mul(a[0].t, a[1].t); }},
      {"div", [](auto& a) { return div(a[0].t, a[1].t); }},
      {"pow", [](auto& a) { return pow(a[0].t, a[1].t); }},
      {"maximum", [](auto& a) { return maximum(a[0].t, a[1].t); }},
      {"minimum", [](auto& a) { return minimum(a[0].t, a[1].t); }},
      {"add_s", [](auto& a) { return add(a[0].t, a[1].s); }},
      {"sub_s", [](auto& a) { return sub(a[0].t, a[1].s); }},
      {"rsub_s", [](auto& a) { return rsub(a[0].t, a[1].s); }},
      {"mul_s", [](auto& a) { return mul(a[0].t, a[1].s); }},
      {"div_s", [](auto& a) { return div(a[0].t, a[1].s); }},
      {"rdiv_s", [](auto& a) { return rdiv(a[0].t, a[1].s); }},
      {"pow_s", [](auto& a) { return pow(a[0].t, a[1].s); }},
      {"rpow_s", [](auto& a) { return pow(a[1].s, a[0].t); }},
      {"eq", [](auto& a) { return eq(a[0].t, a[1].t); }},
      {"ne", [](auto& a) { return ne(a[0].t, a[1].t); }},
      {"lt", [](auto& a) { return lt(a[0].t, a[1].t); }},
      {"le", [](auto& a) { return le(a[0].t, a[1].t); }},
      {"gt", [](auto& a) { return gt(a[0].t, a[1].t); }},
      {"ge", [](auto& a) { return ge(a[0].t, a[1].t); }},
      {"eq_s", [](auto& a) { return eq(a[0].t, a[1].s); }},
      {"ne_s", [](auto& a) { return ne(a[0].t, a[1].s); }},
      {"lt_s", [](auto& a) { return lt(a[0].t, a[1].s); }},
      {"le_s", [](auto& a) { return le(a[0].t, a[1].s); }},
      {"gt_s", [](auto& a) { return gt(a[0].t, a[1].s); }},
      {"ge_s", [](auto& a) { return ge(a[0].t, a[1].s); }},
      {"logical_and", [](auto& a) { return logical_and(a[0].t, a[1].t); }},
      {"logical_or", [](auto& a) { return logical_or(a[0].t, a[1].t); }},
      {"logical_xor", [](auto& a) { return logical_xor(a[0].t, a[1].t); }},
      {"logical_not", [](auto& a) { return logical_not(a[0].t); }},
      {"isclose", [](auto& a) { return isclose(a[0].t, a[1].t); }},
      {"isclose_tol", [](auto& a) { return isclose(a[0].t, a[1].t, a[2].s.to_double(), a[3].s.to_double()); }},
      {"isnan", [](auto& a) { return isnan(a[0].t); }},
      {"isfinite", [](auto& a) { return isfinite(a[0].t); }},
      {"where", [](auto& a) { return where(a[0].t, a[1].t, a[2].t); }},
      {"where_ts", [](auto& a) { return where(a[0].t, a[1].t, a[2].s); }},
      {"where_st", [](auto& a) { return where(a[0].t, a[1].s, a[2].t); }},
      {"masked_fill", [](auto& a) { return masked_fill(a[0].t, a[1].t, a[2].s); }},
  };
  return ops;
}

std::vector<Arg> parse_args(const nlohmann::json& args, bool make_noncontiguous, Device device) {
  const auto& inputs = golden("elementwise_inputs");
  std::vector<Arg> out;
  for (const auto& a : args) {
    if (a.is_string()) {
      Tensor t = golden_tensor(inputs.at(a.get<std::string>()));
      out.push_back({to(make_noncontiguous ? noncontiguous(t) : t, device), 0});
    } else if (a.is_number_integer()) {
      out.push_back({Tensor(), Scalar(a.get<int64_t>())});
    } else {
      out.push_back({Tensor(), Scalar(a.get<double>())});
    }
  }
  return out;
}

// Runs every case of a golden file with contiguous and non-contiguous inputs,
// on every device of the build.
void check_golden_file(const char* file) {
  for_each_device([&](Device d) {
  int n = 0;
  for (const auto& c : golden(file)) {
    std::string op = c.at("op");
    auto it = binary_ops().find(op);
    ASSERT_NE(it, binary_ops().end()) << "no kiln op for golden case " << op;
    Tensor want = golden_tensor(c.at("out"));
    double rtol = want.dtype() == kBF16 ? 1e-2 : 2e-6;
    for (bool nc : {false, true}) {
      Tensor got = it->second(parse_args(c.at("args"), nc, d));
      EXPECT_EQ(got.device(), d) << op;
      got = to(got, kCPU);
      EXPECT_EQ(got.dtype(), want.dtype()) << op << " " << c.at("args").dump();
      EXPECT_TRUE(all_close(got, want, rtol, 1e-6)) << op << " " << c.at("args").dump() << (nc ? " (non-contiguous)" : "");
    }
    ++n;
  }
  EXPECT_GT(n, 5);
  });
}

TEST(BinaryGolden, ArithmeticPromotionAndScalars) { check_golden_file("elementwise_binary"); }
TEST(BinaryGolden, ComparisonsAndLogic) { check_golden_file("elementwise_compare"); }
TEST(BinaryGolden, WhereAndMaskedFill) { check_golden_file("elementwise_select"); }

TEST(Binary, OperatorsMatchFunctions) {
  Tensor a = tensor<float>({1, -2, 3}), b = tensor<float>({4, 5, -6});
  EXPECT_TRUE(equal(a + b, tensor<float>({5, 3, -3})));
  EXPECT_TRUE(equal(a - b, tensor<float>({-3, -7, 9})));
  EXPECT_TRUE(equal(a * b, tensor<float>({4, -10, -18})));
  EXPECT_TRUE(equal(a / 2, tensor<float>({0.5f, -1, 1.5f})));
  EXPECT_TRUE(equal(2 - a, tensor<float>({1, 4, -1})));
  EXPECT_TRUE(equal(6 / b, tensor<float>({1.5f, 1.2f, -1})));
  EXPECT_TRUE(equal(-a, tensor<float>({-1, 2, -3})));
  EXPECT_TRUE(equal(a < b, tensor<bool>({true, true, false})));
  EXPECT_TRUE(equal(!(a < b), tensor<bool>({false, false, true})));
  EXPECT_TRUE(equal((a > 0) && (b > 0), tensor<bool>({true, false, false})));
  EXPECT_TRUE(equal(a == 3, tensor<bool>({false, false, true})));
}

TEST(Binary, IntegerArithmeticWraps) {
  Tensor big = tensor<int64_t>({INT64_MAX, INT64_MIN});
  EXPECT_TRUE(equal(add(big, 1), tensor<int64_t>({INT64_MIN, INT64_MIN + 1})));
  EXPECT_TRUE(equal(mul(tensor<int32_t>({1 << 30}), 4), tensor<int32_t>({0})));
  EXPECT_TRUE(equal(neg(tensor<int64_t>({INT64_MIN})), tensor<int64_t>({INT64_MIN})));
  // Integer pow: negative exponents from a tensor give 1, -1 or 0 (like torch).
  EXPECT_TRUE(equal(pow(tensor<int64_t>({2, -1, 1, 0, 3}), tensor<int64_t>({-1, -3, -2, 2, 3})),
                    tensor<int64_t>({0, -1, 1, 0, 27})));
}

TEST(Binary, ScalarTensorAndEmpty) {
  Tensor s = scalar_tensor(2.0);
  Tensor out = add(s, s);
  EXPECT_EQ(out.dim(), 0);
  EXPECT_EQ(out.item<float>(), 4.0f);
  Tensor e = add(zeros({0, 3}), ones({3}));
  EXPECT_EQ(e.shape(), Shape({0, 3}));
  EXPECT_TRUE(allclose(tensor<float>({1, 2}), tensor<float>({1, 2.000001f})));
  EXPECT_FALSE(allclose(tensor<float>({1, 2}), tensor<float>({1, 2.1f})));
  EXPECT_FALSE(allclose(tensor<float>({NAN}), tensor<float>({NAN})));
}

TEST(Binary, LargeTensorsRunInParallelChunks) {
  // Above the parallel grain: every chunk must line up with its inputs.
  Tensor a = arange(0, 100003, 1, {.dtype = kF32});
  Tensor b = mul(a, 2.0);
  Tensor c = add(a, b);
  EXPECT_TRUE(equal(c, mul(a, 3.0)));
  Tensor m = reshape(a, {100003, 1});
  Tensor bc = add(m, tensor<float>({0, 1}));  // broadcast inner dim of size 2
  EXPECT_EQ(bc.shape(), Shape({100003, 2}));
  EXPECT_EQ(bc[100002][1].item<float>(), 100003.0f);
}

// ---------------------------------------------------------------------------
// Fast kernels against the ref loops, every op on awkward layouts
// ---------------------------------------------------------------------------

Tensor random_of(const Shape& shape, DType t, uint64_t seed) {
  Generator gen(seed);
  if (t == kBool) return gt(rand(shape, gen), 0.5);
  if (!is_floating(t)) return to(randint(-6, 7, shape, gen), t);
  // Values in (-3, 3) with exact ties and zeros sprinkled in.
  Tensor x = mul(sub(rand(shape, gen, {.dtype = kF64}), 0.5), 6.0);
  x = where(lt(abs(x), 0.3), round(x), x);
  return to(x, t);
}

// Pairs of (a, b) layouts covering broadcasting, strides and stride 0.
struct Layout {
  const char* name;
  std::function<Tensor(DType, uint64_t)> a, b;
};

std::vector<Layout> layouts() {
  return {
      {"same", [](DType t, uint64_t s) { return random_of({5, 7}, t, s); },
       [](DType t, uint64_t s) { return random_of({5, 7}, t, s); }},
      {"col x row", [](DType t, uint64_t s) { return random_of({3, 1}, t, s); },
       [](DType t, uint64_t s) { return random_of({1, 4}, t, s); }},
      {"3d x last", [](DType t, uint64_t s) { return random_of({2, 3, 4}, t, s); },
       [](DType t, uint64_t s) { return random_of({4}, t, s); }},
      {"transposed", [](DType t, uint64_t s) { return transpose(random_of({6, 5}, t, s), 0, 1); },
       [](DType t, uint64_t s) { return random_of({5, 6}, t, s); }},
      {"stepped x expanded",
       [](DType t, uint64_t s) { return slice(random_of({4, 9}, t, s), 1, 1, 9, 2); },
       [](DType t, uint64_t s) { return expand(random_of({4, 1}, t, s), {4, 4}); }},
      {"scalar x noncontig", [](DType t, uint64_t s) { return random_of({}, t, s); },
       [](DType t, uint64_t s) { return noncontiguous(random_of({3, 2, 5}, t, s)); }},
      {"large", [](DType t, uint64_t s) { return random_of({70001}, t, s); },
       [](DType t, uint64_t s) { return random_of({70001}, t, s); }},
  };
}

/// Fast and ref loops run the same functors, but a vectorized loop may fuse
/// multiply-adds differently from a scalar one: floating results may differ
/// by a few ulp (more where a formula cancels, as gelu's vjp does for x < 0),
/// everything else must be identical.
::testing::AssertionResult same_result(const Tensor& fast, const Tensor& ref) {
  if (!is_floating(fast.dtype())) return equal(fast, ref);
  return all_close(fast, ref, fast.dtype() == kBF16 ? 1e-2 : 1e-5, 1e-6);
}

bool float_only(backend::cpu::BinaryOp op) {
  using B = backend::cpu::BinaryOp;
  return op == B::div || op >= B::tanh_backward;
}

TEST(BinaryKernel, FastMatchesRefForEveryOp) {
  for_each_kernel_isa([&](KernelIsa) {
    for (int k = 0; k < backend::cpu::kNumBinaryOps; ++k) {
      auto op = backend::cpu::BinaryOp(k);
      for (DType t : {kF32, kF64, kBF16, kI64, kI32, kU8, kBool}) {
        if (float_only(op) && !is_floating(t)) continue;
        if (op == backend::cpu::BinaryOp::pow && !is_floating(t) && t != kBool) continue;  // wraps: checked below
        backend::cpu::OpParams p = op == backend::cpu::BinaryOp::isclose ? backend::cpu::OpParams{1e-2, 1e-3}
                          : op == backend::cpu::BinaryOp::softplus_backward ? backend::cpu::OpParams{1.5, 2.0}
                          : op == backend::cpu::BinaryOp::leaky_relu_backward ? backend::cpu::OpParams{0.1, 0}
                          : op == backend::cpu::BinaryOp::add || op == backend::cpu::BinaryOp::sub ? backend::cpu::OpParams{2, 0}
                                                                                  : backend::cpu::OpParams{};
        for (const Layout& l : layouts()) {
          if (std::string(l.name) == "large" && t != kF32) continue;  // chunking does not depend on dtype
          Tensor a = l.a(t, 11 + k), b = l.b(t, 17 + k);
          if (op == backend::cpu::BinaryOp::pow && is_floating(t)) a = abs(a);
          Shape s = broadcast_shapes("test", a.shape(), b.shape());
          DType ot = backend::cpu::is_predicate(op) ? kBool : t;
          Tensor fast = empty(s, {.dtype = ot}), slow = empty(s, {.dtype = ot});
          backend::cpu::binary(op, fast, a, b, p);
          backend::cpu::ref::binary(op, slow, a, b, p);
          EXPECT_TRUE(same_result(fast, slow)) << "op #" << k << " " << name(t) << " " << l.name;
          // Scalar operand on either side.
          Tensor f2 = empty(b.shape(), {.dtype = ot}), s2 = empty(b.shape(), {.dtype = ot});
          for (bool rev : {false, true}) {
            backend::cpu::binary_scalar(op, f2, b, 2, rev, p);
            backend::cpu::ref::binary_scalar(op, s2, b, 2, rev, p);
            EXPECT_TRUE(same_result(f2, s2)) << "scalar op #" << k << " " << name(t) << " " << l.name << " rev " << rev;
          }
        }
      }
    }
  });
}

TEST(BinaryKernel, IntegerPowFastMatchesRef) {
  for_each_kernel_isa([&](KernelIsa) {
    Tensor a = random_of({4, 5}, kI64, 3), b = abs(random_of({5}, kI64, 4));
    Tensor fast = empty({4, 5}, {.dtype = kI64}), slow = empty({4, 5}, {.dtype = kI64});
    backend::cpu::binary(backend::cpu::BinaryOp::pow, fast, a, b);
    backend::cpu::ref::binary(backend::cpu::BinaryOp::pow, slow, a, b);
    EXPECT_TRUE(same_result(fast, slow));
  });
}

TEST(BinaryKernel, WhereFastMatchesRef) {
  for_each_kernel_isa([&](KernelIsa) {
    for (DType t : {kF32, kF64, kBF16, kI64, kBool}) {
      for (const Layout& l : layouts()) {
        Tensor a = l.a(t, 5), b = l.b(t, 6);
        Shape s = broadcast_shapes("test", a.shape(), b.shape());
        Tensor c = random_of(s.size() > 1 ? Shape{s[s.size() - 1]} : s, kBool, 7);
        Tensor fast = empty(s, {.dtype = t}), slow = empty(s, {.dtype = t});
        backend::cpu::where(fast, c, a, b);
        backend::cpu::ref::where(slow, c, a, b);
        EXPECT_TRUE(same_result(fast, slow)) << name(t) << " " << l.name;
      }
    }
  });
}

// ---------------------------------------------------------------------------
// In place
// ---------------------------------------------------------------------------

TEST(BinaryInplace, WritesSelfAndBumpsVersion) {
  Tensor a = tensor<float>({1, 2, 3, 4}, {2, 2});
  uint64_t v0 = a.storage()->version();
  Tensor r = add_(a, tensor<float>({10, 20}));
  EXPECT_TRUE(r.is_same(a));
  EXPECT_TRUE(equal(a, tensor<float>({11, 22, 13, 24}, {2, 2})));
  EXPECT_GT(a.storage()->version(), v0);
  sub_(a, 1);
  mul_(a, tensor<float>({2}));
  div_(a, 4);
  EXPECT_TRUE(equal(a, tensor<float>({5, 10.5f, 6, 11.5f}, {2, 2})));
  add_(a, tensor<float>({1, 1, 1, 1}, {2, 2}), 3);
  a += 1;
  a *= 2;
  EXPECT_TRUE(equal(a, tensor<float>({18, 29, 20, 31}, {2, 2})));
  pow_(a, 0.5);
  EXPECT_TRUE(all_close(a, sqrt(tensor<float>({18, 29, 20, 31}, {2, 2}))));
  fill_(a, 2.5);
  EXPECT_TRUE(equal(a, full({2, 2}, 2.5)));
  zero_(a);
  EXPECT_TRUE(equal(a, zeros({2, 2})));
}

TEST(BinaryInplace, WiderOperandAndAliasing) {
  // f32 += f64 computes in f64, stores f32.
  Tensor a = tensor<float>({1, 2});
  add_(a, tensor<double>({0.5, 0.25}));
  EXPECT_TRUE(equal(a, tensor<float>({1.5f, 2.25f})));
  // i64 += i32 and *= bool stay i64.
  Tensor i = tensor<int64_t>({3, 4});
  add_(i, tensor<int32_t>({1, 1}));
  mul_(i, tensor<bool>({true, false}));
  EXPECT_TRUE(equal(i, tensor<int64_t>({4, 0})));
  // other is a transposed view of self: read before written.
  Tensor m = tensor<float>({1, 2, 3, 4}, {2, 2});
  add_(m, transpose(m, 0, 1));
  EXPECT_TRUE(equal(m, tensor<float>({2, 5, 5, 8}, {2, 2})));
  // A view of self is written through.
  Tensor base = zeros({2, 3});
  add_(base.select(0, 1), 1.0);
  EXPECT_TRUE(equal(base, tensor<float>({0, 0, 0, 1, 1, 1}, {2, 3})));
  Tensor x = tensor<float>({1, -2, 3});
  masked_fill_(x, tensor<bool>({true, false, false}), 9);
  EXPECT_TRUE(equal(x, tensor<float>({9, -2, 3})));
}

TEST(BinaryInplace, GradientFlowsThroughNonLeaf) {
  Tensor w = leaf({3}, 1), u = leaf({3}, 2);
  Tensor y = mul(w, 2.0);
  mul_(y, u);  // y = 2 w u
  add_(y, w);  // y = 2 w u + w
  sum(y).backward();
  EXPECT_TRUE(all_close(w.grad(), add(mul(u, 2.0), 1.0).detach()));
  EXPECT_TRUE(all_close(u.grad(), mul(w, 2.0).detach()));
}

TEST(BinaryInplace, GradcheckInplaceForms) {
  auto clone_then = [](auto f) { return [f](const std::vector<Tensor>& x) { Tensor y = clone(x[0]); f(y, x[1]); return y; }; };
  std::vector<Tensor> in = {leaf({3, 4}, 1), leaf({4}, 2, 0.5, 1.5)};
  EXPECT_GRADCHECK(clone_then([](Tensor& y, const Tensor& b) { add_(y, b, 2); }), in);
  EXPECT_GRADCHECK(clone_then([](Tensor& y, const Tensor& b) { sub_(y, b); }), in);
  EXPECT_GRADCHECK(clone_then([](Tensor& y, const Tensor& b) { mul_(y, b); }), in);
  EXPECT_GRADCHECK(clone_then([](Tensor& y, const Tensor& b) { div_(y, b); }), in);
  EXPECT_GRADCHECK(clone_then([](Tensor& y, const Tensor& b) { mul_(y, 3); pow_(y, 2); add_(y, 1); }), in);
  EXPECT_GRADCHECK(clone_then([](Tensor& y, const Tensor& b) { masked_fill_(y, gt(b, 1.0), 0); }), in);
  EXPECT_GRADCHECK(clone_then([](Tensor& y, const Tensor& b) { fill_(y, 1); add_(y, b); }), in);
}

// ---------------------------------------------------------------------------
// Gradchecks (f64)
// ---------------------------------------------------------------------------

// Shape pairs: scalars, vectors, matrices, broadcasting both ways.
const std::vector<std::pair<Shape, Shape>> kShapes = {
    {{}, {}}, {{5}, {5}}, {{3, 4}, {3, 4}}, {{3, 1}, {1, 4}}, {{2, 3, 4}, {4}}, {{4}, {2, 3, 4}}, {{}, {2, 3}}};

template <class F>
void gradcheck_binary(const char* what, F f, double lo_a = -1, double hi_a = 1, double lo_b = -1, double hi_b = 1) {
  uint64_t seed = 100;
  for (const auto& [sa, sb] : kShapes) {
    std::vector<Tensor> in = {leaf(sa, ++seed, lo_a, hi_a), leaf(sb, ++seed, lo_b, hi_b)};
    auto fn = [&](const std::vector<Tensor>& x) { return f(x[0], x[1]); };
    EXPECT_GRADCHECK(fn, in);
    // Non-contiguous inputs.
    std::vector<Tensor> nc = {noncontiguous(in[0]), noncontiguous(in[1])};
    EXPECT_GRADCHECK(fn, nc);
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << what << " shapes " << to_string(sa) << " " << to_string(sb);
      return;
    }
  }
}

TEST(BinaryGrad, Arithmetic) {
  gradcheck_binary("add", [](const Tensor& a, const Tensor& b) { return add(a, b); });
  gradcheck_binary("add alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, -2.5); });
  gradcheck_binary("sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); });
  gradcheck_binary("mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); });
  gradcheck_binary("div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, -1, 1, 0.5, 2);
  gradcheck_binary("pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, 0.5, 2, -1.5, 1.5);
  gradcheck_binary("maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); });
  gradcheck_binary("minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); });
  gradcheck_binary("where", [](const Tensor& a, const Tensor& b) { return where(gt(add(a, b), 0.1), a, b); });
}

TEST(BinaryGrad, ScalarForms) {
  std::vector<Tensor> in = {leaf({3, 4}, 7, 0.5, 2)};
  auto check = [&](auto f) { EXPECT_GRADCHECK([f](const std::vector<Tensor>& x) { return f(x[0]); }, in); };
  check([](const Tensor& a) { return add(a, 2.5); });
  check([](const Tensor& a) { return sub(a, 2); });
  check([](const Tensor& a) { return rsub(a, 2); });
  check([](const Tensor& a) { return mul(a, -3); });
  check([](const Tensor& a) { return div(a, 4); });
  check([](const Tensor& a) { return rdiv(a, 3); });
  check([](const Tensor& a) { return pow(a, 2); });
  check([](const Tensor& a) { return pow(a, 3.5); });
  check([](const Tensor& a) { return pow(a, -1); });
  check([](const Tensor& a) { return pow(2.5, a); });
  check([](const Tensor& a) { return where(gt(a, 1.0), a, 0.5); });
  check([](const Tensor& a) { return where(gt(a, 1.0), 0.5, a); });
  check([](const Tensor& a) { return masked_fill(a, gt(a, 1.0), -1); });
  check([](const Tensor& a) { return masked_fill(a, tensor<bool>({true, false, false, true}), 2); });
  check([](const Tensor& a) { return masked_fill(a, tensor<bool>({true, false, false}, {3, 1}), 2); });
  check([](const Tensor& a) { return masked_fill(a, tensor<bool>({true, false}, {2, 1, 1}), 2); });
}

TEST(BinaryGrad, MixedDtypesGiveGradientsInInputDtype) {
  Tensor a = leaf({3}, 1);
  Tensor b = to(tensor<float>({1, 2, 3}), kF32).requires_grad_(true);
  Tensor y = mul(a, b);  // f64
  EXPECT_EQ(y.dtype(), kF64);
  sum(y).backward();
  EXPECT_EQ(b.grad().dtype(), kF32);
  EXPECT_TRUE(all_close(b.grad(), to(a.detach(), kF32)));
  // Integer operands get no gradient; the float side still does.
  Tensor c = leaf({3}, 2);
  sum(mul(c, tensor<int64_t>({1, 2, 3}))).backward();
  EXPECT_TRUE(all_close(c.grad(), tensor<double>({1, 2, 3})));
}

TEST(BinaryGrad, TiesAndSpecialPoints) {
  // maximum/minimum split the gradient evenly on ties; NaN sends it to both.
  Tensor x = tensor<double>({1, 2, 2}).requires_grad_(true);
  Tensor y = tensor<double>({1, 3, NAN}).requires_grad_(true);
  sum(maximum(x, y)).backward();
  EXPECT_TRUE(equal(x.grad(), tensor<double>({0.5, 0, 1})));
  EXPECT_TRUE(equal(y.grad(), tensor<double>({0.5, 1, 1})));
  // pow at a == 0: no NaN (matches torch).
  Tensor a = tensor<double>({0, 0, 2}).requires_grad_(true);
  Tensor e = tensor<double>({0, 2, -1}).requires_grad_(true);
  sum(pow(a, e)).backward();
  EXPECT_TRUE(all_close(a.grad(), tensor<double>({0, 0, -0.25})));
  EXPECT_TRUE(all_close(e.grad(), tensor<double>({0, 0, 0.5 * std::log(2.0)})));
  Tensor e2 = tensor<double>({0, 2, -1}).requires_grad_(true);
  sum(pow(0.0, e2)).backward();
  EXPECT_TRUE(equal(e2.grad(), tensor<double>({0, 0, -INFINITY})));
  Tensor z = tensor<double>({0, 1}).requires_grad_(true);
  sum(pow(z, 0)).backward();
  EXPECT_TRUE(equal(z.grad(), tensor<double>({0, 0})));
}

TEST(BinaryGrad, SecondOrder) {
  // create_graph through mul and div: d2/da2 of a^2 / b = 2 / b.
  Tensor a = leaf({3}, 1), b = leaf({3}, 2, 1, 2);
  auto fn = [](const std::vector<Tensor>& x) {
    EnableGradGuard on;  // gradcheck evaluates under NoGradGuard
    Tensor y = div(mul(x[0], x[0]), x[1]);
    auto g = grad({sum(y)}, {x[0]}, {}, /*retain_graph=*/true, /*create_graph=*/true);
    return g[0];
  };
  EXPECT_GRADCHECK(fn, {a, b});
}

TEST(BinaryGrad, ComparisonsAreNotDifferentiable) {
  Tensor a = leaf({3}, 1);
  EXPECT_FALSE(lt(a, 0.0).requires_grad());
  EXPECT_FALSE(eq(a, a).requires_grad());
  EXPECT_FALSE(isnan(a).requires_grad());
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

TEST(BinaryErrors, Messages) {
  Tensor a = zeros({2, 3}), b = zeros({4});
  EXPECT_KILN_ERROR(add(a, b), "[add] shapes [2, 3] and [4] cannot be broadcast");
  EXPECT_KILN_ERROR(mul(a, zeros({3, 3})), "[mul] shapes [2, 3] and [3, 3] cannot be broadcast");
  EXPECT_KILN_ERROR(where(zeros({2, 3}), a, a), "[where] condition must be a bool tensor, got f32");
  EXPECT_KILN_ERROR(masked_fill(a, zeros({3}), 1), "[masked_fill] mask must be a bool tensor, got f32");
  EXPECT_KILN_ERROR(add(a, Tensor()), "[add] b is an undefined tensor");
  EXPECT_KILN_ERROR(sub(tensor<bool>({true}), tensor<bool>({false})), "[sub] subtraction of a bool tensor");
  EXPECT_KILN_ERROR(pow(tensor<int64_t>({2}), -1), "[pow] integers to negative integer powers are not allowed");
  EXPECT_KILN_ERROR(add(tensor<int64_t>({2}), tensor<int64_t>({2}), 1.5), "[add] alpha 1.5 must not be a floating");
  EXPECT_KILN_ERROR(isclose(a, a, -1.0), "[isclose] rtol (-1) and atol (1e-08) must be non-negative");
}

TEST(BinaryErrors, InplaceChecksLeaveSelfUntouched) {
  Tensor i = tensor<int64_t>({1, 2});
  EXPECT_KILN_ERROR(add_(i, 1.5), "[add_] result type f32 can't be cast to the desired output type i64");
  EXPECT_KILN_ERROR(div_(i, tensor<int64_t>({1, 1})), "[div_] result type f32 can't be cast to the desired output type i64");
  EXPECT_KILN_ERROR(mul_(tensor<bool>({true}), tensor<int64_t>({1})), "result type i64 can't be cast to the desired output type bool");
  EXPECT_TRUE(equal(i, tensor<int64_t>({1, 2})));
  Tensor a = zeros({3});
  EXPECT_KILN_ERROR(add_(a, zeros({2, 3})), "[add_] other of shape [2, 3] does not broadcast to self of shape [3]");
  EXPECT_KILN_ERROR(add_(expand(zeros({1}), {3}), 1), "[add_] more than one element of the written-to tensor");
  EXPECT_KILN_ERROR(masked_fill_(a, tensor<bool>({true, false}, {2, 1}), 1), "[masked_fill_] mask of shape [2, 1] does not broadcast");
  Tensor w = leaf({3}, 1);
  EXPECT_KILN_ERROR(add_(w, 1), "[add_] a leaf tensor of shape [3] that requires grad cannot be modified in place");
  EXPECT_KILN_ERROR(mul_(w, w), "[mul_] a leaf tensor of shape [3] that requires grad");
  EXPECT_KILN_ERROR(fill_(w, 0), "[fill_] a leaf tensor");
  {
    NoGradGuard g;  // parameter updates are fine without grad mode
    Tensor before = w.detach().clone();
    sub_(w, 1);
    EXPECT_TRUE(all_close(w.detach(), sub(before, 1)));
  }
}

TEST(BinaryErrors, SavedTensorModifiedInPlace) {
  Tensor a = leaf({3}, 1);
  Tensor b = mul(a, 2.0);
  Tensor y = mul(b, b);  // saves b
  add_(b, 1);
  EXPECT_KILN_ERROR(sum(y).backward(), "modified in place");
}

}  // namespace
}  // namespace kiln
