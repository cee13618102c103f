// Tests of the joining and rearranging ops of kiln/ops/index.h (cat, stack,
// split, chunk, unbind, flip, roll, pad, repeat, tril, triu): PyTorch
// goldens, view semantics, gradchecks in f64 and error messages.
#include <functional>

#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;

Tensor j(const char* name) { return golden_tensor(golden("index_join").at(name)); }
Tensor r(const char* name) { return golden_tensor(golden("index_rearrange").at(name)); }

std::vector<int64_t> sizes_along(const std::vector<Tensor>& ts, int64_t dim) {
  std::vector<int64_t> out;
  for (const Tensor& t : ts) out.push_back(t.size(dim));
  return out;
}

// ---------------------------------------------------------------------------
// cat / stack
// ---------------------------------------------------------------------------

TEST(Cat, MatchesTorch) {
  Tensor a = j("a"), b = j("b"), c = j("c"), d = j("d"), e = j("e");
  Tensor out = cat({a, b, c}, 1);  // f32, f64 and i32 promote to f64
  EXPECT_TRUE(equal(out, j("cat_d1")));
  EXPECT_TRUE(equal(cat({noncontiguous(a), b, noncontiguous(c)}, -1), j("cat_d1")));
  EXPECT_TRUE(equal(cat({a, e, d}, 0), j("cat_d0_skip")));  // [0] is skipped
  EXPECT_TRUE(equal(cat({c, to(c, kI64)}, 0), j("cat_int_int")));
  EXPECT_EQ(cat({e, e}).shape(), Shape({0}));
  EXPECT_EQ(cat({e, to(e, kF64)}).dtype(), kF64);
  Tensor grad_e = zeros({0}, {.requires_grad = true});
  EXPECT_TRUE(cat({grad_e, e}).requires_grad());
}

TEST(Cat, LargeAndMixedLayoutsMatchNarrowedOutput) {
  Generator gen(3);
  // dim 1 (many outer rows, parallel), dim 0 (one outer row, split memcpy),
  // and a bf16 input converted to f32.
  for (int64_t dim : {0, 1}) {
    Tensor a = randn({300, 200}, gen), b = randn({300, 100}, gen);
    Tensor bt = noncontiguous(b), c = to(randn({300, 50}, gen), kBF16);
    if (dim == 0) {
      a = randn({400, 300}, gen);
      bt = noncontiguous(randn({100, 300}, gen));
      c = to(randn({50, 300}, gen), kBF16);
    }
    Tensor out = cat({a, bt, c}, dim);
    ASSERT_EQ(out.dtype(), kF32);
    int64_t off = 0;
    for (const Tensor& x : {a, bt, c}) {
      EXPECT_TRUE(equal(narrow(out, dim, off, x.size(dim)), to(x, kF32))) << "dim " << dim;
      off += x.size(dim);
    }
  }
}

TEST(Stack, MatchesTorch) {
  std::vector<Tensor> s{j("s0"), j("s1"), j("s2")};
  EXPECT_TRUE(equal(stack(s, 0), j("stack_d0")));
  EXPECT_TRUE(equal(stack(s, 1), j("stack_d1")));
  EXPECT_TRUE(equal(stack(s, -1), j("stack_dm1")));
  EXPECT_TRUE(equal(stack({noncontiguous(s[0]), s[1], s[2]}, 2), j("stack_dm1")));
  EXPECT_EQ(stack({scalar_tensor(1.0), scalar_tensor(2.0)}).shape(), Shape({2}));
}

TEST(CatGrad, Shapes) {
  Fn f1 = [](const std::vector<Tensor>& v) { return cat({v[0], v[1], v[2]}, 1); };
  EXPECT_GRADCHECK(f1, {leaf({2, 3}, 1), leaf({2, 1}, 2), leaf({2, 4}, 3)});
  EXPECT_GRADCHECK(f1, {noncontiguous(leaf({2, 3}, 1)), leaf({2, 1}, 2), noncontiguous(leaf({2, 4}, 3))});
  Fn f0 = [](const std::vector<Tensor>& v) { return cat({v[0], zeros({0}, {.dtype = kF64}), v[1]}, -3); };
  EXPECT_GRADCHECK(f0, {leaf({1, 2, 2}, 4), leaf({3, 2, 2}, 5)});
  // A constant integer input gets no gradient; the f64 leaf gets its slice.
  Tensor x = leaf({2, 2}, 6);
  Tensor y = cat({tensor<int32_t>({1, 2}, {1, 2}), x}, 0);
  EXPECT_TRUE(y.requires_grad());
  sum(mul(y, y)).backward();
  EXPECT_TRUE(all_close(x.grad(), mul(x, 2.0)));
}

TEST(CatGrad, StackAndMixedPrecision) {
  EXPECT_GRADCHECK([](const std::vector<Tensor>& v) { return stack({v[0], v[1]}, 1); }, {leaf({2, 3}, 7), leaf({2, 3}, 8)});
  EXPECT_GRADCHECK([](const std::vector<Tensor>& v) { return stack({v[0], v[1], v[0]}, -1); },
                   {noncontiguous(leaf({3, 2}, 9)), leaf({3, 2}, 10)});
  // An f32 input joined with f64 gets an f32 gradient.
  Tensor a = zeros({2}, {.requires_grad = true});
  Tensor out = cat({a, leaf({3}, 11)});
  sum(out).backward();
  EXPECT_EQ(a.grad().dtype(), kF32);
  EXPECT_TRUE(equal(a.grad(), ones({2})));
}

TEST(CatErrors, Messages) {
  EXPECT_KILN_ERROR(cat({}), "[cat] expected a non-empty list of tensors");
  EXPECT_KILN_ERROR(cat({zeros({2, 3}), zeros({2, 4})}, 0),
                    "[cat] sizes must match except in dim 0: tensor 1 has shape [2, 4] but tensor 0 has [2, 3] (dim 1: 4 vs 3)");
  EXPECT_KILN_ERROR(cat({zeros({2, 3}), zeros({2, 3, 1})}, 0), "[cat] tensor 1 has 3 dims ([2, 3, 1]), expected 2");
  EXPECT_KILN_ERROR(cat({zeros({2}), scalar_tensor(1.0)}), "[cat] tensor 1 is 0-dim and cannot be concatenated");
  EXPECT_KILN_ERROR(cat({zeros({2, 3})}, 2), "[cat] dim 2 out of range");
  EXPECT_KILN_ERROR(cat({zeros({2}), Tensor()}), "[cat] tensor 1 is undefined");
  EXPECT_KILN_ERROR(stack({zeros({2, 3}), zeros({3, 2})}), "[stack] tensor 1 has shape [3, 2], expected [2, 3] like tensor 0");
  EXPECT_KILN_ERROR(stack({zeros({2, 3})}, 3), "[stack] dim 3 out of range");
  EXPECT_KILN_ERROR(stack({}), "[stack] expected a non-empty list");
}

// ---------------------------------------------------------------------------
// split / chunk / unbind
// ---------------------------------------------------------------------------

TEST(Split, SizesMatchTorch) {
  const auto& g = golden("index_join");
  EXPECT_EQ(sizes_along(split(arange(7), 3), 0), g.at("split_sizes_7_3").get<std::vector<int64_t>>());
  EXPECT_EQ(sizes_along(chunk(arange(5), 4), 0), g.at("chunk_sizes_5_4").get<std::vector<int64_t>>());
  EXPECT_EQ(sizes_along(chunk(arange(6), 4), 0), g.at("chunk_sizes_6_4").get<std::vector<int64_t>>());
  EXPECT_EQ(sizes_along(chunk(arange(13), 5), 0), g.at("chunk_sizes_13_5").get<std::vector<int64_t>>());
  EXPECT_EQ(sizes_along(chunk(zeros({0}), 3), 0), g.at("chunk_sizes_0_3").get<std::vector<int64_t>>());
  EXPECT_EQ(sizes_along(split(zeros({0, 2}), 2), 0), std::vector<int64_t>({0}));
  EXPECT_EQ(sizes_along(split(zeros({3, 10}), std::vector<int64_t>{4, 0, 6}, -1), 1), std::vector<int64_t>({4, 0, 6}));
}

TEST(Split, PiecesAreViewsWithTheRightValues) {
  Tensor x = reshape(arange(0, 24, 1, {.dtype = kF32}), {2, 3, 4});
  auto parts = split(x, 3, 2);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_TRUE(equal(parts[1], narrow(x, 2, 3, 1)));
  EXPECT_TRUE(parts[0].is_same_storage(x));
  fill_(parts[1], -1.0);  // writing through a piece changes the base
  EXPECT_EQ(x.to_vector<float>()[3], -1.0f);
  auto rows = unbind(x, 1);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[2].shape(), Shape({2, 4}));
  EXPECT_TRUE(equal(rows[2], select(x, 1, 2)));
  EXPECT_TRUE(rows[2].is_same_storage(x));
  auto cs = chunk(x, 2, -2);
  EXPECT_EQ(sizes_along(cs, 1), std::vector<int64_t>({2, 1}));
  EXPECT_TRUE(equal(cs[1], narrow(x, 1, 2, 1)));
}

TEST(SplitGrad, AllForms) {
  // Weighted sums of the pieces, so each gets a distinct gradient; pieces
  // that are not used still get zeros.
  EXPECT_GRADCHECK(
      [](const std::vector<Tensor>& v) -> std::vector<Tensor> {
        auto p = split(v[0], 2, 1);
        return {mul(p[0], 2.0), p[2]};
      },
      {leaf({3, 5}, 1)});
  EXPECT_GRADCHECK(
      [](const std::vector<Tensor>& v) -> std::vector<Tensor> {
        auto p = split(v[0], std::vector<int64_t>{1, 3, 1}, -1);
        return {p[1], mul(p[2], 3.0)};
      },
      {noncontiguous(leaf({3, 5}, 2))});
  EXPECT_GRADCHECK(
      [](const std::vector<Tensor>& v) -> std::vector<Tensor> {
        auto p = chunk(v[0], 3, 0);
        return {p[0], mul(p[1], p[1])};
      },
      {leaf({5, 2}, 3)});
  EXPECT_GRADCHECK(
      [](const std::vector<Tensor>& v) -> std::vector<Tensor> {
        auto p = unbind(v[0], 1);
        return {mul(p[0], p[2]), p[1]};
      },
      {noncontiguous(leaf({2, 3, 2}, 4))});
}

TEST(SplitErrors, Messages) {
  EXPECT_KILN_ERROR(split(zeros({4}), 0), "[split] split size must be positive (0 only for an empty dim), got 0");
  EXPECT_KILN_ERROR(split(zeros({4}), std::vector<int64_t>{1, 2}), "[split] sizes [1, 2] add up to 3, but dim 0 of input [4] has size 4");
  EXPECT_KILN_ERROR(split(zeros({4}), std::vector<int64_t>{5, -1}), "[split] sizes must be non-negative, got [5, -1]");
  EXPECT_KILN_ERROR(split(scalar_tensor(1.0), 1), "[split] cannot split a 0-dim tensor");
  EXPECT_KILN_ERROR(split(zeros({4}), 2, 1), "[split] dim 1 out of range");
  EXPECT_KILN_ERROR(chunk(zeros({4}), 0), "[chunk] chunks must be positive, got 0");
  EXPECT_KILN_ERROR(unbind(zeros({2}), -2), "[unbind] dim -2 out of range");
}

// ---------------------------------------------------------------------------
// flip / roll / pad / repeat / tril / triu
// ---------------------------------------------------------------------------

TEST(Rearrange, MatchesTorch) {
  Tensor x = r("x");
  for (const Tensor& xl : {x, noncontiguous(x)}) {
    EXPECT_TRUE(equal(flip(xl, {0, 2}), r("flip_02")));
    EXPECT_TRUE(equal(flip(xl, {-1}), r("flip_m1")));
    EXPECT_TRUE(equal(roll(xl, 2, 1), r("roll_2_d1")));
    EXPECT_TRUE(equal(roll(xl, -1, 0), r("roll_m1_d0")));
    EXPECT_TRUE(equal(roll(xl, 7, 2), r("roll_7_d2")));
    EXPECT_TRUE(equal(roll(xl, 5), r("roll_flat_5")));
    EXPECT_TRUE(equal(pad(xl, {1, 2}), r("pad_1_2")));
    EXPECT_TRUE(equal(pad(xl, {1, -1, 2, 0}, 0.5), r("pad_1_m1_2_0")));
    EXPECT_TRUE(equal(pad(xl, {-1, -1}), r("pad_m1_m1")));
    EXPECT_TRUE(equal(pad(xl, {0, 1, -1, 1, 1, 0}, -3.0), r("pad_3d")));
    EXPECT_TRUE(equal(repeat(xl, {2, 1, 3}), r("repeat_2_1_3")));
    EXPECT_TRUE(equal(repeat(xl, {2, 1, 1, 2}), r("repeat_2_1_1_2")));
  }
  Tensor m = r("m");
  for (const Tensor& ml : {m, noncontiguous(m), transpose(contiguous(transpose(m, 1, 2)), 1, 2)}) {
    EXPECT_TRUE(equal(tril(ml), r("tril_0")));
    EXPECT_TRUE(equal(tril(ml, -1), r("tril_m1")));
    EXPECT_TRUE(equal(tril(ml, 2), r("tril_2")));
    EXPECT_TRUE(equal(triu(ml), r("triu_0")));
    EXPECT_TRUE(equal(triu(ml, -1), r("triu_m1")));
    EXPECT_TRUE(equal(triu(ml, 2), r("triu_2")));
    EXPECT_TRUE(equal(triu(ml, 9), r("triu_big")));
    EXPECT_TRUE(equal(tril(ml, -9), r("tril_small")));
  }
}

TEST(Rearrange, EdgeCasesAndDtypes) {
  Tensor x = reshape(arange(6), {2, 3});  // i64
  EXPECT_TRUE(equal(flip(x, {}), x));
  EXPECT_FALSE(flip(x, {}).is_same_storage(x));
  EXPECT_TRUE(equal(roll(x, 3, 1), x));
  EXPECT_TRUE(equal(roll(x, -4, 1), roll(x, 2, 1)));
  EXPECT_EQ(roll(zeros({0, 3}), 2, 0).shape(), Shape({0, 3}));
  EXPECT_TRUE(equal(pad(x, {0, 0}), x));
  EXPECT_EQ(pad(x, {-2, -1}).shape(), Shape({2, 0}));
  EXPECT_TRUE(equal(pad(tensor<int64_t>({1, 2}), {1, 0}, 9), tensor<int64_t>({9, 1, 2})));
  EXPECT_TRUE(equal(pad(tensor<float>({1, 2, 3}), {-2, 3}, 7), tensor<float>({3, 7, 7, 7})));
  EXPECT_EQ(repeat(x, {0, 2}).shape(), Shape({0, 6}));
  EXPECT_EQ(repeat(scalar_tensor(2.0), {3}).to_vector<float>(), std::vector<float>({2, 2, 2}));
  Tensor rep = repeat(x, {1, 1});
  EXPECT_FALSE(rep.is_same_storage(x));  // always a copy, like torch
  Tensor b = gt(ones({2, 3}), 0.0);
  EXPECT_TRUE(equal(tril(b), tensor<bool>({true, false, false, true, true, false}, {2, 3})));
  EXPECT_TRUE(equal(triu(to(ones({3, 2}), kBF16), 1), to(tensor<float>({0, 1, 0, 0, 0, 0}, {3, 2}), kBF16)));
  // Large enough for the parallel row loop.
  Tensor big = ones({8, 300, 300});
  Tensor lower = tril(big, 5);
  EXPECT_EQ(sum(lower).item<double>(), 8.0 * sum(tril(ones({300, 300}), 5)).item<double>());
  EXPECT_TRUE(equal(add(tril(big, -1), triu(big)), big));
}

TEST(RearrangeGrad, AllOps) {
  Tensor x = leaf({2, 3, 4}, 1);
  Tensor xn = noncontiguous(leaf({2, 3, 4}, 2));
  for (const Tensor& in : {x, xn}) {
    EXPECT_GRADCHECK([](const std::vector<Tensor>& v) { return flip(v[0], {0, -1}); }, {in});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& v) { return roll(v[0], 2, 1); }, {in});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& v) { return roll(v[0], -5); }, {in});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& v) { return pad(v[0], {1, -2, 0, 1}, 4.0); }, {in});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& v) { return pad(v[0], {-1, 0, 2, -1, 1, 1}); }, {in});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& v) { return repeat(v[0], {2, 1, 1, 2}); }, {in});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& v) { return tril(v[0], 1); }, {in});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& v) { return triu(v[0], -1); }, {in});
  }
  EXPECT_GRADCHECK([](const std::vector<Tensor>& v) { return repeat(v[0], {3}); }, {leaf({2}, 3)});
}

TEST(RearrangeGrad, SecondOrder) {
  // Vjps are built from differentiable ops, so gradients of gradients work.
  EXPECT_GRADCHECK(
      [](const std::vector<Tensor>& v) {
        EnableGradGuard on;  // gradcheck evaluates under NoGradGuard
        Tensor y = pad(roll(flip(v[0], {1}), 1, 0), {1, -1});
        return grad({sum(mul(y, y))}, {v[0]}, {}, true, true)[0];
      },
      {leaf({3, 4}, 4)});
  EXPECT_GRADCHECK(
      [](const std::vector<Tensor>& v) {
        EnableGradGuard on;  // gradcheck evaluates under NoGradGuard
        Tensor y = cat({tril(v[0]), v[0]}, 1);
        return grad({sum(mul(y, y))}, {v[0]}, {}, true, true)[0];
      },
      {leaf({3, 3}, 5)});
}

TEST(SplitGrad, GradientsThatTileOneTensorJoinAsAView) {
  // split's vjp: gradients that are the consecutive slices of one tensor (the
  // attention's q, k, v gradients in one [B, T, 3C] buffer) come back as a
  // view of it, no cat; anything else is a fresh cat with the same values.
  Generator gen(3);
  Tensor x = randn({4, 6}, gen).requires_grad_(true);
  std::vector<Tensor> parts = split(x, 2, 1);
  Tensor whole = randn({4, 6}, gen);
  std::vector<Tensor> slices = split(whole, 2, 1);
  Tensor gx = grad(parts, {x}, slices, /*retain_graph=*/true)[0];
  EXPECT_TRUE(gx.is_same_storage(whole));
  EXPECT_TRUE(equal(gx, whole));
  for (const std::vector<Tensor>& gs : {std::vector<Tensor>{slices[1], slices[0], slices[2]},
                                         std::vector<Tensor>{slices[0], contiguous(slices[1]), slices[2]}}) {
    Tensor g2 = grad(parts, {x}, gs, /*retain_graph=*/true)[0];
    EXPECT_FALSE(g2.is_same_storage(whole));
    EXPECT_TRUE(equal(g2, cat(gs, 1)));
  }
  // create_graph: the join stays on the tape (a cat), so it can be differentiated.
  Tensor w = randn({4, 6}, gen).requires_grad_(true);
  std::vector<Tensor> ws = split(w, 2, 1);
  Tensor g3 = grad(parts, {x}, ws, false, true)[0];
  EXPECT_FALSE(g3.is_same_storage(w));
  EXPECT_TRUE(g3.requires_grad());
  EXPECT_TRUE(equal(g3, w));
}

TEST(RearrangeErrors, Messages) {
  Tensor x = zeros({2, 3});
  EXPECT_KILN_ERROR(flip(x, {1, -1}), "[flip] dim 1 appears more than once in dims [1, -1]");
  EXPECT_KILN_ERROR(flip(x, {2}), "[flip] dim 2 out of range");
  EXPECT_KILN_ERROR(roll(x, 1, 2), "[roll] dim 2 out of range");
  EXPECT_KILN_ERROR(pad(x, {1}), "[pad] padding [1] has odd length 1");
  EXPECT_KILN_ERROR(pad(x, {1, 1, 1, 1, 1, 1}), "[pad] padding [1, 1, 1, 1, 1, 1] covers 3 dims, but input [2, 3] has only 2");
  EXPECT_KILN_ERROR(pad(x, {-2, -2}), "[pad] dim 1 of size 3 padded by (-2, -2) would have negative size -1");
  EXPECT_KILN_ERROR(repeat(x, {2}), "[repeat] 1 repeats [2] given for input [2, 3] with 2 dims; need at least 2");
  EXPECT_KILN_ERROR(repeat(x, {2, -1}), "[repeat] repeats must be non-negative, got [2, -1]");
  EXPECT_KILN_ERROR(tril(zeros({3})), "[tril] input [3] has 1 dims, expected at least 2");
  EXPECT_KILN_ERROR(triu(scalar_tensor(1.0)), "[triu] input [] has 0 dims, expected at least 2");
}

}  // namespace
}  // namespace kiln
