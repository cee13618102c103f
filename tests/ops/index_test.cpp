// Tests of the indexing ops of kiln/ops/index.h (gather, scatter, scatter_add,
// index_select, index_add, embedding, one_hot): PyTorch goldens, fast kernels
// against the backend::cpu::ref loops on awkward layouts, gradchecks in f64, errors.
#include <functional>

#include "src/backend/cpu/index/index.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;

Tensor g(const char* name) { return golden_tensor(golden("index_gather").at(name)); }

Tensor idx(std::vector<int64_t> v, const Shape& shape) { return tensor(v, shape); }

// Random indices in [0, high) of `shape` (i64 unless asked).
Tensor random_index(int64_t high, const Shape& shape, uint64_t seed, DType dtype = kI64) {
  Generator gen(seed);
  return to(randint(0, high, shape, gen), dtype);
}

Tensor random_values(const Shape& shape, uint64_t seed, DType dtype = kF32) {
  Generator gen(seed);
  if (!is_floating(dtype)) return to(randint(-50, 50, shape, gen), dtype);
  return to(randn(shape, gen), dtype);
}

// ---------------------------------------------------------------------------
// Forward values against PyTorch
// ---------------------------------------------------------------------------

TEST(Gather, MatchesTorch) {
  Tensor x = g("x");
  EXPECT_TRUE(equal(gather(x, 1, g("i1")), g("gather_d1")));
  EXPECT_TRUE(equal(gather(x, -1, g("i2")), g("gather_dm1")));
  EXPECT_TRUE(equal(gather(x, 0, g("i0")), g("gather_d0")));
  // i32 indices and non-contiguous inputs give the same values.
  EXPECT_TRUE(equal(gather(noncontiguous(x), 1, to(g("i1"), kI32)), g("gather_d1")));
  EXPECT_TRUE(equal(gather(x, 0, noncontiguous(g("i0"))), g("gather_d0")));
}

TEST(Gather, ScalarInputAndEmptyIndex) {
  Tensor s = scalar_tensor(2.5);
  EXPECT_EQ(gather(s, 0, scalar_tensor(int64_t(0))).item<float>(), 2.5f);
  Tensor out = gather(g("x"), 1, Tensor::empty({3, 0, 5}, kI64));
  EXPECT_EQ(out.shape(), Shape({3, 0, 5}));
}

TEST(Scatter, MatchesTorch) {
  Tensor base = g("base"), sidx = g("sidx"), src = g("src");
  EXPECT_TRUE(equal(scatter(base, 1, sidx, src), g("scatter")));
  EXPECT_TRUE(equal(scatter(base, 1, sidx, -2.5), g("scatter_value")));
  EXPECT_TRUE(equal(scatter(base, 0, clamp_max(narrow(sidx, 0, 0, 2), 2), src), g("scatter_d0")));
  EXPECT_TRUE(equal(scatter_add(base, 1, g("aidx"), g("asrc")), g("scatter_add")));
  EXPECT_TRUE(equal(scatter_add(noncontiguous(base), 1, noncontiguous(g("aidx")), noncontiguous(g("asrc"))),
                    g("scatter_add")));
}

TEST(Scatter, DuplicateIndicesLastWriteWins) {
  Tensor x = zeros({2, 4});
  Tensor out = scatter(x, 1, idx({1, 1, 1, 3, 0, 3}, {2, 3}), tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  EXPECT_TRUE(equal(out, tensor<float>({0, 3, 0, 0, 5, 0, 0, 6}, {2, 4})));
  // scatter_add sums them.
  Tensor sum = scatter_add(x, 1, idx({1, 1, 1, 3, 0, 3}, {2, 3}), tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  EXPECT_TRUE(equal(sum, tensor<float>({0, 6, 0, 0, 5, 0, 0, 10}, {2, 4})));
  // x itself is untouched.
  EXPECT_TRUE(equal(x, zeros({2, 4})));
}

TEST(IndexSelect, MatchesTorch) {
  Tensor x = g("x"), sel = g("sel");
  EXPECT_TRUE(equal(index_select(x, 0, clamp_max(sel, 2)), g("index_select_d0")));
  EXPECT_TRUE(equal(index_select(x, 2, sel), g("index_select_d2")));
  EXPECT_TRUE(equal(index_select(x, -1, to(sel, kI32)), g("index_select_d2")));
  EXPECT_TRUE(equal(index_select(noncontiguous(x), 2, sel), g("index_select_d2")));
  // A 0-dim index selects one entry and keeps the dim.
  EXPECT_EQ(index_select(x, 1, scalar_tensor(int64_t(2))).shape(), Shape({3, 1, 5}));
}

TEST(IndexAdd, MatchesTorch) {
  Tensor x = g("x");
  Tensor base = contiguous(narrow(x, 2, 0, 3));
  EXPECT_TRUE(equal(index_add(base, 2, clamp_max(g("sel"), 2), g("isrc")), g("index_add_d2")));
  EXPECT_TRUE(equal(index_add(narrow(x, 2, 0, 3), 2, clamp_max(g("sel"), 2), noncontiguous(g("isrc"))),
                    g("index_add_d2")));
}

TEST(Embedding, MatchesTorch) {
  EXPECT_TRUE(equal(embedding(g("w"), g("e_idx")), g("embedding")));
  EXPECT_TRUE(equal(embedding(noncontiguous(g("w")), noncontiguous(to(g("e_idx"), kI32))), g("embedding")));
  EXPECT_EQ(embedding(g("w"), Tensor::empty({0}, kI64)).shape(), Shape({0, 3}));
  EXPECT_EQ(embedding(g("w"), scalar_tensor(int64_t(4))).shape(), Shape({3}));
}

TEST(OneHot, MatchesTorch) {
  const auto& j = golden("index_order");
  Tensor oh = golden_tensor(j.at("oh"));
  EXPECT_TRUE(equal(one_hot(oh), golden_tensor(j.at("one_hot"))));
  EXPECT_TRUE(equal(one_hot(oh, 5), golden_tensor(j.at("one_hot_5"))));
  EXPECT_TRUE(equal(one_hot(noncontiguous(to(oh, kI32)), 5), golden_tensor(j.at("one_hot_5"))));
  EXPECT_EQ(one_hot(Tensor::empty({0}, kI64), 3).shape(), Shape({0, 3}));
  EXPECT_EQ(one_hot(idx({0, 1}, {2}), 2).dtype(), kI64);
}

// ---------------------------------------------------------------------------
// Fast kernels against the reference loops
// ---------------------------------------------------------------------------

// Layouts of an input: contiguous, transposed in memory, every other element.
std::vector<Tensor> layouts(const Tensor& x) {
  NoGradGuard ng;
  std::vector<Tensor> out{x, noncontiguous(x)};
  Shape s = x.shape();
  s[s.size() - 1] *= 2;
  Tensor wide = zeros(s, {.dtype = x.dtype()});
  Tensor strided = slice(wide, -1, 0, s.back(), 2);
  copy_(strided, x);
  out.push_back(strided);
  return out;
}

TEST(IndexKernels, GatherMatchesReference) {
  // Every dtype on small shapes; f32 on shapes large enough for the pool.
  for (DType dt : {kF32, kF64, kBF16, kI64, kU8}) {
    std::vector<std::pair<Shape, int64_t>> cases{{{7, 5, 3}, 0}, {{7, 5, 3}, 1}, {{7, 5, 3}, 2}, {{1, 9, 1}, 1}};
    if (dt == kF32) cases.insert(cases.end(), {{{64, 700}, 1}, {{700, 64}, 0}});
    for (auto [shape, dim] : cases) {
      Tensor x = random_values(shape, 1, dt);
      Shape is = shape;
      is[size_t(dim)] = shape[size_t(dim)] + 2;  // index longer than x along dim
      for (DType it : {kI64, kI32}) {
        Tensor index = random_index(shape[size_t(dim)], is, 2, it);
        for (const Tensor& xl : layouts(x))
          for (const Tensor& il : layouts(index)) {
            Tensor fast = empty(is, {.dtype = dt}), ref = empty(is, {.dtype = dt});
            backend::cpu::gather(xl, dim, il, fast);
            backend::cpu::ref::gather(xl, dim, il, ref);
            ASSERT_TRUE(equal(fast, ref)) << name(dt) << " " << to_string(shape) << " dim " << dim;
          }
      }
    }
  }
}

TEST(IndexKernels, ScatterMatchesReference) {
  for (DType dt : {kF32, kF64, kBF16, kI32}) {
    std::vector<std::pair<Shape, int64_t>> cases{{{7, 5, 3}, 0}, {{7, 5, 3}, 1}, {{7, 5, 3}, 2}};
    if (dt == kF32) cases.insert(cases.end(), {{{40, 500}, 1}, {{500, 40}, 0}});
    for (auto [shape, dim] : cases) {
      Shape is = shape;
      is[size_t(dim)] = shape[size_t(dim)] * 2;  // many duplicates along dim
      Tensor index = random_index(shape[size_t(dim)], is, 3);
      Tensor src = random_values(is, 4, dt);
      for (auto mode : {backend::cpu::ScatterMode::assign, backend::cpu::ScatterMode::add})
        for (const Tensor& il : layouts(index))
          for (const Tensor& sl : layouts(src)) {
            Tensor base = random_values(shape, 5, dt);
            Tensor fast = clone(base), ref = clone(base);
            Tensor fast_nc = layouts(base)[1];  // writes through a non-contiguous out too
            backend::cpu::scatter(fast, dim, il, sl, mode);
            backend::cpu::scatter(fast_nc, dim, il, sl, mode);
            backend::cpu::ref::scatter(ref, dim, il, sl, mode);
            ASSERT_TRUE(equal(fast, ref)) << name(dt) << " " << to_string(shape) << " dim " << dim;
            ASSERT_TRUE(equal(fast_nc, ref)) << name(dt) << " " << to_string(shape) << " dim " << dim;
          }
    }
  }
}

TEST(IndexKernels, IndexSelectMatchesReference) {
  for (DType dt : {kF32, kBF16, kI64, kBool}) {
    std::vector<std::pair<Shape, int64_t>> cases{{{6, 5, 4}, 0}, {{6, 5, 4}, 1}, {{6, 5, 4}, 2}};
    if (dt == kF32) cases.insert(cases.end(), {{{100, 400}, 0}, {{400, 100}, 1}});
    for (auto [shape, dim] : cases) {
      Tensor x = dt == kBool ? gt(random_values(shape, 6), 0.0) : random_values(shape, 6, dt);
      for (DType it : {kI64, kI32}) {
        Tensor index = random_index(shape[size_t(dim)], {2 * shape[size_t(dim)] + 1}, 7, it);
        Shape os = shape;
        os[size_t(dim)] = index.numel();
        for (const Tensor& xl : layouts(x))
          for (const Tensor& il : {index, slice(repeat(index, {2}), 0, 0, 2 * index.numel(), 2)}) {
            Tensor fast = empty(os, {.dtype = dt}), ref = empty(os, {.dtype = dt});
            backend::cpu::index_select(xl, dim, il, fast);
            backend::cpu::ref::index_select(xl, dim, il, ref);
            ASSERT_TRUE(equal(fast, ref)) << name(dt) << " " << to_string(shape) << " dim " << dim;
          }
      }
    }
  }
}

TEST(IndexKernels, IndexAddMatchesScatterAdd) {
  // index_add == scatter_add with the index broadcast over src's shape.
  for (auto [shape, dim, n] : std::vector<std::tuple<Shape, int64_t, int64_t>>{
           {{6, 5, 4}, 0, 9}, {{6, 5, 4}, 1, 3}, {{6, 5, 4}, 2, 11}, {{50, 2000}, 0, 300}, {{3, 2000}, 1, 40}}) {
    Tensor index = random_index(shape[size_t(dim)], {n}, 8);
    Shape ss = shape;
    ss[size_t(dim)] = n;
    Tensor src = random_values(ss, 9, kF64), base = random_values(shape, 10, kF64);
    Shape view_shape = Shape::filled(shape.size(), 1);
    view_shape[size_t(dim)] = n;
    Tensor expanded = expand(reshape(index, view_shape), ss);
    EXPECT_TRUE(all_close(index_add(base, dim, index, noncontiguous(src)), scatter_add(base, dim, expanded, src),
                          1e-12, 1e-12))
        << to_string(shape) << " dim " << dim;
  }
}

TEST(IndexKernels, EmbeddingLargeMatchesRows) {
  Tensor w = random_values({1000, 96}, 11);
  Tensor ids = random_index(1000, {16, 64}, 12);
  Tensor out = embedding(w, ids);
  ASSERT_EQ(out.shape(), Shape({16, 64, 96}));
  auto iv = ids.to_vector<int64_t>();
  for (int64_t k : {0, 17, 500, 1023})
    EXPECT_TRUE(equal(select(reshape(out, {-1, 96}), 0, k), select(w, 0, iv[size_t(k)])));
}

// ---------------------------------------------------------------------------
// Gradients
// ---------------------------------------------------------------------------

TEST(IndexGrad, Gather) {
  Tensor x = leaf({3, 4, 5}, 1);
  Tensor i1 = random_index(4, {3, 6, 2}, 2), i0 = random_index(3, {2, 4, 5}, 3);
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& v) { return gather(v[0], 1, i1); }, {x});
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& v) { return gather(v[0], -3, i0); }, {x});
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& v) { return gather(v[0], -1, random_index(5, {3, 4, 7}, 4)); },
                   {noncontiguous(x)});
}

TEST(IndexGrad, Scatter) {
  Tensor x = leaf({3, 5}, 5), src = leaf({4, 4}, 6);
  Tensor unique = idx({0, 2, 4, 1, 3, 0, 4, 3, 2}, {3, 3});
  Fn f = [&](const std::vector<Tensor>& v) { return scatter(v[0], 1, unique, v[1]); };
  EXPECT_GRADCHECK(f, {x, src});
  EXPECT_GRADCHECK(f, {noncontiguous(x), noncontiguous(src)});
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& v) { return scatter(v[0], 0, idx({2, 0, 1, 1}, {1, 4}), v[1]); },
                   {x, src});
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& v) { return scatter(v[0], -1, unique, 3.0); }, {x});
}

TEST(IndexGrad, ScatterAdd) {
  Tensor x = leaf({3, 5}, 7), src = leaf({3, 6}, 8);
  Tensor dup = idx({0, 0, 4, 1, 1, 1, 2, 3, 2, 2, 0, 0}, {3, 4});
  Fn f = [&](const std::vector<Tensor>& v) { return scatter_add(v[0], 1, dup, v[1]); };
  EXPECT_GRADCHECK(f, {x, src});
  EXPECT_GRADCHECK(f, {noncontiguous(x), noncontiguous(src)});
  Tensor x3 = leaf({2, 3, 4}, 9), s3 = leaf({4, 3, 4}, 10);
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& v) { return scatter_add(v[0], 0, random_index(2, {4, 2, 4}, 11), v[1]); },
                   {x3, s3});
}

TEST(IndexGrad, IndexSelectAndIndexAdd) {
  Tensor x = leaf({4, 3, 5}, 12);
  Tensor dup = idx({3, 0, 3, 1, 3}, {5});
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& v) { return index_select(v[0], 0, dup); }, {x});
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& v) { return index_select(v[0], -1, to(dup, kI32)); },
                   {noncontiguous(x)});
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& v) { return index_select(v[0], 1, idx({2, 2}, {2})); }, {x});
  Tensor src = leaf({4, 5, 5}, 13);
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& v) { return index_add(v[0], 1, idx({0, 2, 2, 1, 0}, {5}), v[1]); },
                   {leaf({4, 3, 5}, 14), src});
}

TEST(IndexGrad, Embedding) {
  Tensor w = leaf({6, 3}, 15);
  Tensor ids = idx({5, 0, 2, 2, 1, 5}, {2, 3});
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& v) { return embedding(v[0], ids); }, {w});
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& v) { return embedding(v[0], noncontiguous(ids)); },
                   {noncontiguous(w)});
  // The gradient of repeated rows adds up.
  Tensor loss = sum(embedding(w, ids));
  loss.backward();
  EXPECT_TRUE(all_close(w.grad(), tensor<double>({1, 1, 1, 1, 1, 1, 2, 2, 2, 0, 0, 0, 0, 0, 0, 2, 2, 2}, {6, 3})));
}

TEST(IndexGrad, SecondOrderThroughGather) {
  // loss = sum(gather(x)^2): dloss/dx_i = 2 x_i c_i with c_i how often x_i is
  // picked, so d(sum(dloss/dx))/dx_i = 2 c_i.
  Tensor x = leaf({2, 3}, 16);
  Tensor index = idx({0, 0, 2, 1, 1, 1}, {2, 3});
  Tensor gx = grad({sum(mul(gather(x, 1, index), gather(x, 1, index)))}, {x}, {}, true, true)[0];
  Tensor gg = grad({sum(gx)}, {x})[0];
  EXPECT_TRUE(all_close(gg, tensor<double>({4, 0, 2, 0, 6, 0}, {2, 3})));
}

TEST(IndexGrad, SecondOrderThroughScatterAndIndexSelect) {
  Tensor x = leaf({3, 2}, 17);
  Tensor index = idx({2, 2, 0}, {3});
  EXPECT_GRADCHECK(
      [&](const std::vector<Tensor>& v) {
        EnableGradGuard on;  // gradcheck evaluates under NoGradGuard
        Tensor y = index_select(v[0], 0, index);
        return grad({sum(mul(y, y))}, {v[0]}, {}, true, true)[0];
      },
      {x});
  EXPECT_GRADCHECK(
      [&](const std::vector<Tensor>& v) {
        EnableGradGuard on;  // gradcheck evaluates under NoGradGuard
        Tensor y = scatter_add(v[0], 1, idx({1, 1, 0, 0, 1, 0}, {3, 2}), v[0]);
        return grad({sum(mul(y, y))}, {v[0]}, {}, true, true)[0];
      },
      {x});
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

TEST(IndexErrors, Gather) {
  Tensor x = zeros({3, 5});
  EXPECT_KILN_ERROR(gather(x, 1, idx({0, 5}, {1, 2})), "[gather] index 5 is out of range for dim 1 of size 5");
  EXPECT_KILN_ERROR(gather(x, 0, idx({0, -1}, {1, 2})), "index -1 is out of range for dim 0 of size 3");
  EXPECT_KILN_ERROR(gather(x, 1, idx({0, 1}, {2})), "[gather] index [2] has 1 dims, expected 2 like input [3, 5]");
  EXPECT_KILN_ERROR(gather(x, 1, idx({0, 0, 0, 0}, {4, 1})), "index [4, 1] is larger than input [3, 5] in dim 0");
  EXPECT_KILN_ERROR(gather(x, 2, idx({0}, {1, 1})), "[gather] dim 2 out of range");
  EXPECT_KILN_ERROR(gather(x, 1, zeros({1, 1})), "[gather] index [1, 1] has dtype f32, expected i64 or i32");
  EXPECT_KILN_ERROR(gather(Tensor(), 1, idx({0}, {1, 1})), "[gather] input is an undefined tensor");
}

TEST(IndexErrors, Scatter) {
  Tensor x = zeros({3, 5});
  Tensor i = idx({0, 9}, {1, 2});
  EXPECT_KILN_ERROR(scatter(x, 1, i, zeros({1, 2})), "[scatter] index 9 is out of range for dim 1 of size 5");
  EXPECT_KILN_ERROR(scatter(x, 1, i, 1.0), "[scatter] index 9 is out of range");
  EXPECT_KILN_ERROR(scatter_add(x, 1, i, zeros({1, 2})), "[scatter_add] index 9 is out of range");
  Tensor ok = idx({0, 1}, {1, 2});
  EXPECT_KILN_ERROR(scatter(x, 1, ok, zeros({1, 2}, {.dtype = kF64})), "[scatter] src has dtype f64, expected f32");
  EXPECT_KILN_ERROR(scatter_add(x, 1, ok, zeros({1, 1})), "[scatter_add] index [1, 2] is larger than src [1, 1] in dim 1");
  EXPECT_KILN_ERROR(scatter(x, 1, ok, zeros({2})), "[scatter] src [2] has 1 dims, expected 2");
  // The bad index is the last one: nothing may be written before the check.
  Tensor before = clone(x);
  EXPECT_KILN_ERROR(scatter_add(x, 1, idx({0, 1, 2, 7}, {1, 4}), ones({1, 4})), "index 7");
  EXPECT_TRUE(equal(x, before));
}

TEST(IndexErrors, IndexSelectAndIndexAdd) {
  Tensor x = zeros({3, 5});
  EXPECT_KILN_ERROR(index_select(x, 0, idx({0, 3}, {2})), "[index_select] index 3 is out of range for dim 0 of size 3");
  EXPECT_KILN_ERROR(index_select(x, 0, idx({0, 1}, {1, 2})), "[index_select] index must be 1-D, got shape [1, 2]");
  EXPECT_KILN_ERROR(index_select(scalar_tensor(1.0), 0, idx({0}, {1})), "[index_select] cannot index a 0-dim tensor");
  EXPECT_KILN_ERROR(index_select(x, 0, tensor<float>({0})), "[index_select] index [1] has dtype f32");
  EXPECT_KILN_ERROR(index_add(x, 1, idx({0, 1}, {2}), zeros({3, 3})),
                    "[index_add] src [3, 3] does not match input [3, 5] with dim 1 of size 2");
  EXPECT_KILN_ERROR(index_add(x, 1, idx({0, 5}, {2}), zeros({3, 2})), "[index_add] index 5 is out of range");
  EXPECT_KILN_ERROR(index_add(x, 1, idx({0, 1}, {2}), zeros({3, 2}, {.dtype = kF64})),
                    "[index_add] src has dtype f64, expected f32");
}

TEST(IndexErrors, Embedding) {
  Tensor w = zeros({6, 4});
  EXPECT_KILN_ERROR(embedding(w, idx({1, 6}, {2})), "[embedding] index 6 is out of range for 6 embeddings (weight [6, 4])");
  EXPECT_KILN_ERROR(embedding(w, idx({-2}, {1})), "[embedding] index -2 is out of range");
  EXPECT_KILN_ERROR(embedding(zeros({6}), idx({1}, {1})), "[embedding] weight must be 2-D");
  EXPECT_KILN_ERROR(embedding(w, zeros({2})), "[embedding] indices [2] has dtype f32, expected i64 or i32");
}

TEST(IndexErrors, OneHot) {
  EXPECT_KILN_ERROR(one_hot(idx({0, -1}, {2})), "[one_hot] class value -1 is negative");
  EXPECT_KILN_ERROR(one_hot(idx({0, 3}, {2}), 3), "[one_hot] class value 3 is out of range for num_classes 3");
  EXPECT_KILN_ERROR(one_hot(Tensor::empty({0}, kI64)), "[one_hot] cannot infer num_classes from an empty tensor");
  EXPECT_KILN_ERROR(one_hot(idx({0}, {1}), -2), "[one_hot] num_classes must be -1 (infer) or non-negative, got -2");
  EXPECT_KILN_ERROR(one_hot(zeros({2})), "[one_hot] indices [2] has dtype f32");
}

}  // namespace
}  // namespace kiln
