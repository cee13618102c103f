// Tests of rotary_embedding: goldens from a PyTorch reference (both pair
// conventions, offset, explicit positions, partial rotary_dim), the fused
// kernel against backend::cpu::ref, rotation properties (norms kept, scores depend on
// relative position only), gradchecks in f64 and error messages.
#include <cmath>

#include "src/backend/cpu/nn/rotary.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using nlohmann::json;
using namespace testing;

RotaryOptions options_from(const json& a) {
  RotaryOptions o;
  o.base = a.at("base").get<double>();
  o.offset = a.at("offset").get<int64_t>();
  o.rotary_dim = a.at("rotary_dim").get<int64_t>();
  o.interleaved = a.at("interleaved").get<bool>();
  if (a.contains("positions")) o.positions = tensor(a.at("positions").get<std::vector<int64_t>>());
  return o;
}

TEST(RotaryGolden, ForwardAndGradMatchPyTorch) {
  size_t seen = 0;
  for (const json& c : golden("rotary").at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    ++seen;
    const RotaryOptions o = options_from(c.at("args"));
    for (bool nc : {false, true}) {
      SCOPED_TRACE(nc ? "non-contiguous" : "contiguous");
      Tensor x = golden_tensor(c.at("x"));
      const bool f64 = x.dtype() == kF64;
      const double rtol = f64 ? 1e-12 : 1e-5, atol = f64 ? 1e-12 : 1e-6;
      if (nc) x = noncontiguous(x);
      x.requires_grad_();
      Tensor y = rotary_embedding(x, o);
      EXPECT_TRUE(all_close(y, golden_tensor(c.at("out")), rtol, atol)) << "forward";
      sum(y * golden_tensor(c.at("c"))).backward();
      EXPECT_TRUE(all_close(x.grad(), golden_tensor(c.at("grad")), rtol, atol)) << "grad";
    }
  }
  EXPECT_EQ(seen, 10u);
}

TEST(RotaryKernels, FastMatchesRef) {
  Generator gen(11);
  auto pick = [&](int64_t lo, int64_t hi) { return lo + randint(0, hi - lo + 1, {}, gen).item<int64_t>(); };
  for (int i = 0; i < 40; ++i)
    for (DType t : {kF32, kF64, kBF16}) {
      backend::cpu::RotaryGeom g;
      g.rows = pick(1, 6), g.T = pick(1, 9), g.D = 2 * pick(1, i % 4 == 3 ? 40 : 6);
      g.rd = 2 * pick(1, g.D / 2), g.interleaved = i % 2 == 1;
      const int sign = i % 3 == 2 ? -1 : 1;
      const double base = i % 5 == 0 ? 500.0 : 10000.0;
      std::vector<int64_t> pos(static_cast<size_t>(g.T));
      for (auto& p : pos) p = pick(-20, 3000);
      SCOPED_TRACE(fmt::format("case {} {}: rows {} T {} D {} rd {} interleaved {} sign {}", i, name(t), g.rows, g.T,
                               g.D, g.rd, g.interleaved, sign));
      Tensor x = to(randn({g.rows, g.T, g.D}, gen), t);
      if (i % 2) x = noncontiguous(x);
      Tensor table = empty({2, g.T, g.rd / 2}, {.dtype = t == kF64 ? kF64 : kF32});
      backend::cpu::rotary_table(pos, base, g.rd, table);
      Tensor a = empty(x.shape(), {.dtype = t}), r = empty(x.shape(), {.dtype = t});
      backend::cpu::rotary(g, x, table, sign, a);
      backend::cpu::ref::rotary(g, x, pos, base, sign, r);
      const double tol = t == kBF16 ? 2e-2 : t == kF32 ? 1e-5 : 1e-12;
      EXPECT_TRUE(all_close(a, r, tol, tol));
    }
}

TEST(Rotary, RotationProperties) {
  Generator gen(12);
  for (bool il : {false, true}) {
    SCOPED_TRACE(il ? "interleaved" : "half-split");
    Tensor q = randn({2, 3, 7, 16}, gen, {.dtype = kF64}), k = randn({2, 3, 7, 16}, gen, {.dtype = kF64});
    Tensor rq = rotary_embedding(q, {.interleaved = il});
    // A rotation keeps each row's norm; position 0 is the identity.
    EXPECT_TRUE(all_close(sum(rq * rq, {-1}), sum(q * q, {-1}), 1e-12, 1e-12));
    EXPECT_TRUE(all_close(select(rq, 2, 0), select(q, 2, 0), 0, 0));
    // q_m . k_n depends on m - n only: shifting every position keeps the scores.
    auto scores = [&](int64_t offset) {
      return matmul(rotary_embedding(q, {.offset = offset, .interleaved = il}),
                    transpose(rotary_embedding(k, {.offset = offset, .interleaved = il}), -1, -2));
    };
    EXPECT_TRUE(all_close(scores(0), scores(1234), 1e-9, 1e-9));
    // offset is positions = offset + arange(T); features past rotary_dim pass through.
    Tensor p = tensor(std::vector<int64_t>{5, 6, 7, 8, 9, 10, 11});
    EXPECT_TRUE(equal(rotary_embedding(q, {.offset = 5, .interleaved = il}),
                      rotary_embedding(q, {.positions = p, .interleaved = il})));
    EXPECT_TRUE(equal(rotary_embedding(q, {.positions = to(p, kI32), .interleaved = il}),
                      rotary_embedding(q, {.positions = p, .interleaved = il})));
    Tensor part = rotary_embedding(q, {.offset = 3, .rotary_dim = 6, .interleaved = il});
    EXPECT_TRUE(equal(slice(part, -1, 6, 16), slice(q, -1, 6, 16)));
    EXPECT_TRUE(equal(slice(part, -1, 0, 6), rotary_embedding(contiguous(slice(q, -1, 0, 6)), {.offset = 3, .interleaved = il})));
  }
  // The two conventions are the same rotation up to a permutation of features.
  Tensor x = randn({4, 8}, gen);
  Tensor perm = tensor(std::vector<int64_t>{0, 2, 4, 6, 1, 3, 5, 7});  // interleaved -> halves
  Tensor a = index_select(rotary_embedding(x, {.offset = 2, .interleaved = true}), -1, perm);
  EXPECT_TRUE(all_close(a, rotary_embedding(index_select(x, -1, perm), {.offset = 2})));
}

TEST(RotaryGrad, FirstAndSecondOrder) {
  uint64_t seed = 500;
  for (bool nc : {false, true}) {
    SCOPED_TRACE(nc ? "non-contiguous" : "contiguous");
    auto in = [&](const Shape& s) { Tensor x = leaf(s, ++seed); return nc ? noncontiguous(x) : x; };
    auto check = [&](RotaryOptions o, const Shape& s) {
      EXPECT_GRADCHECK([o](const std::vector<Tensor>& v) { return rotary_embedding(v[0], o); }, {in(s)});
    };
    check({}, {2, 3, 4, 6});
    check({.interleaved = true}, {2, 3, 4, 6});
    check({.offset = 17, .rotary_dim = 4}, {3, 5, 8});
    check({.base = 100, .positions = tensor(std::vector<int64_t>{3, 1, 4}), .rotary_dim = 2, .interleaved = true},
          {2, 3, 5});
  }
  TensorFn outer = [](const std::vector<Tensor>& in) {
    TensorFn loss = [](const std::vector<Tensor>& v) {
      Tensor y = rotary_embedding(v[0], {.offset = 2});
      return sum(y * y * y);
    };
    Tensor g = kiln::grad(loss, {in[0]})[0];
    return sum(g * g);
  };
  EXPECT_GRADCHECK(outer, {leaf({2, 3, 4}, 550)});
}

TEST(Rotary, SameForAnyThreadCount) {
  Generator gen(13);
  Tensor x = randn({4, 4, 64, 32}, gen), gy = randn({4, 4, 64, 32}, gen);
  const int before = get_num_threads();
  std::vector<Tensor> outs, grads;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    Tensor xg = x.detach().requires_grad_();
    Tensor y = rotary_embedding(xg, {.offset = 7});
    y.backward(gy);
    outs.push_back(y), grads.push_back(xg.grad());
  }
  set_num_threads(before);
  EXPECT_TRUE(equal(outs[0], outs[1]));
  EXPECT_TRUE(equal(grads[0], grads[1]));
}

TEST(RotaryErrors, Messages) {
  Tensor x = ones({2, 3, 5, 8});
  EXPECT_KILN_ERROR(rotary_embedding(Tensor()), "[rotary_embedding] input is an undefined tensor");
  EXPECT_KILN_ERROR(rotary_embedding(ones({8})), "[rotary_embedding] input [8] must have at least 2 dims [..., T, D], got 1-D");
  EXPECT_KILN_ERROR(rotary_embedding(ones({5, 8}, {.dtype = kI32})), "[rotary_embedding] expects a floating input, got i32 [5, 8]");
  EXPECT_KILN_ERROR(rotary_embedding(x, {.rotary_dim = 3}), "[rotary_embedding] rotary_dim must be positive and even, got 3");
  EXPECT_KILN_ERROR(rotary_embedding(ones({5, 7})), "[rotary_embedding] rotary_dim must be positive and even, got 7 (input [5, 7], -1 means D)");
  EXPECT_KILN_ERROR(rotary_embedding(x, {.rotary_dim = 0}), "rotary_dim must be positive and even, got 0");
  EXPECT_KILN_ERROR(rotary_embedding(x, {.rotary_dim = 10}), "[rotary_embedding] rotary_dim 10 exceeds the feature dim D = 8 of input [2, 3, 5, 8]");
  EXPECT_KILN_ERROR(rotary_embedding(x, {.base = 0}), "[rotary_embedding] base must be positive and finite, got 0");
  EXPECT_KILN_ERROR(rotary_embedding(x, {.positions = arange(4)}),
                    "[rotary_embedding] positions [4] must be 1-D of length T = 5 (dim -2 of input [2, 3, 5, 8])");
  EXPECT_KILN_ERROR(rotary_embedding(x, {.positions = zeros({5, 1}, {.dtype = kI64})}), "positions [5, 1] must be 1-D of length T = 5");
  EXPECT_KILN_ERROR(rotary_embedding(x, {.positions = zeros({5})}), "[rotary_embedding] positions must be an integer tensor, got f32 [5]");
  EXPECT_KILN_ERROR(rotary_embedding(x, {.offset = 2, .positions = arange(5)}),
                    "[rotary_embedding] give either offset (2) or positions, not both");
}

}  // namespace
}  // namespace kiln
