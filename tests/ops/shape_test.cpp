// Tests of the view and layout ops of kiln/ops/shape.h: PyTorch goldens, view
// semantics (shared storage, when reshape copies, Python-style slice
// clamping), gradchecks in f64 over shapes, dims and layouts, and errors.
#include <functional>

#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;

Tensor v(const char* name) { return golden_tensor(golden("shape_views").at(name)); }

Tensor iota(const Shape& shape, DType dtype = kF32) {
  return reshape(arange(0, numel(shape), 1, {.dtype = dtype}), shape);
}

// ---------------------------------------------------------------------------
// Values against PyTorch
// ---------------------------------------------------------------------------

TEST(Views, MatchTorch) {
  Tensor x = v("x");  // [2, 3, 4, 3]
  for (const Tensor& xl : {x, noncontiguous(x)}) {
    EXPECT_TRUE(equal(transpose(xl, 1, 3), v("transpose_1_3")));
    EXPECT_TRUE(equal(transpose(xl, -1, 0), v("transpose_m1_0")));
    EXPECT_TRUE(equal(permute(xl, {2, 0, 3, 1}), v("permute_2_0_3_1")));
    EXPECT_TRUE(equal(permute(xl, {-1, -2, 0, 1}), v("permute_m1_m2_0_1")));
    EXPECT_TRUE(equal(narrow(xl, 2, 1, 2), v("narrow_2_1_2")));
    EXPECT_TRUE(equal(narrow(xl, -1, -3, 2), v("narrow_m1_m3_2")));
    EXPECT_TRUE(equal(slice(xl, 3, -10, 100, 2), v("slice_3_m10_100_2")));
    EXPECT_TRUE(equal(slice(xl, 1, -2, 3), v("slice_1_m2_3_1")));
    EXPECT_TRUE(equal(slice(xl, 0, 5, 9), v("slice_0_5_9_1")));
    EXPECT_TRUE(equal(slice(xl, 3, 1, -1, 3), v("slice_3_1_m1_3")));
    EXPECT_TRUE(equal(slice(xl, 2, -1, -3), v("slice_2_m1_m3_1")));
    EXPECT_TRUE(equal(slice(xl, 2, 0, 4, 3), v("slice_2_0_4_3")));
    EXPECT_TRUE(equal(select(xl, 2, -1), v("select_2_m1")));
    EXPECT_TRUE(equal(select(xl, 0, 1), v("select_0_1")));
    EXPECT_TRUE(equal(xl[1], v("select_0_1")));
    EXPECT_TRUE(equal(flatten(xl, 1, 2), v("flatten_1_2")));
    EXPECT_TRUE(equal(flatten(xl), v("flatten_all")));
    EXPECT_TRUE(equal(unflatten(xl, 3, {-1, 1}), v("unflatten_3_m1_1")));
    EXPECT_TRUE(equal(reshape(xl, {-1, 8}), v("view_m1_8")));
    EXPECT_TRUE(equal(sum_to(xl, {3, 1, 3}), v("sum_to_3_1_3")));
    EXPECT_TRUE(equal(sum_to(xl, {1, 3}), v("sum_to_1_3")));
    EXPECT_TRUE(equal(sum_to(xl, {4, 1}), v("sum_to_4_1")));
  }
  EXPECT_TRUE(equal(view(x, {-1, 8}), v("view_m1_8")));
  Tensor c = v("c");  // [3, 1]
  EXPECT_TRUE(equal(expand(c, {2, 3, 4}), v("expand_2_3_4")));
  EXPECT_TRUE(equal(expand(c, {-1, 6}), v("expand_m1_6")));
  EXPECT_TRUE(equal(broadcast_to(c, {2, 3, 4}), v("expand_2_3_4")));
}

// ---------------------------------------------------------------------------
// View semantics
// ---------------------------------------------------------------------------

TEST(Views, ShareStorageAndWriteThrough) {
  Tensor x = iota({2, 3, 4});
  std::vector<std::pair<const char*, Tensor>> views{
      {"view", view(x, {6, 4})},          {"transpose", transpose(x, 0, 2)},
      {"permute", permute(x, {1, 2, 0})}, {"narrow", narrow(x, 1, 1, 2)},
      {"slice", slice(x, 2, 1, 4, 2)},    {"select", select(x, 1, -1)},
      {"expand", expand(unsqueeze(x, 0), {5, 2, 3, 4})},
      {"squeeze", squeeze(unsqueeze(x, 1))}, {"flatten", flatten(x, 0, 1)},
      {"unflatten", unflatten(x, 2, {2, 2})}, {"method_t", x[0].t()},
  };
  for (auto& [what, t] : views) {
    EXPECT_TRUE(t.is_same_storage(x)) << what;
    EXPECT_TRUE(t.is_view()) << what;
  }
  // Writing through a view changes the base: x[1, 2, 1] and x[1, 2, 3].
  fill_(select(slice(x, 2, 1, 4, 2), 1, 2), -7.0);
  auto xs = x.to_vector<float>();
  EXPECT_EQ(xs[1 * 12 + 2 * 4 + 1], -7.0f);
  EXPECT_EQ(xs[1 * 12 + 2 * 4 + 3], -7.0f);
  EXPECT_EQ(xs[1 * 12 + 2 * 4 + 2], 22.0f);
  // and the other way round.
  Tensor t = transpose(x, 0, 2);
  fill_(x, 1.5);
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(24, 1.5f));
}

TEST(Views, ViewOfNonViewableLayoutThrowsMentioningReshape) {
  Tensor x = iota({2, 3});
  EXPECT_KILN_ERROR(view(transpose(x, 0, 1), {-1}), "use reshape()");
  EXPECT_KILN_ERROR(view(transpose(x, 0, 1), {6}), "[view] input [3, 2] with strides [1, 3] cannot be viewed as [6]");
  EXPECT_KILN_ERROR(view(slice(iota({4, 4}), 1, 0, 3), {12}), "use reshape()");
  EXPECT_EQ(view(slice(iota({4, 4}), 1, 0, 4, 2), {8}).strides(), Strides({2}));  // evenly strided: viewable
  // Views that only split or merge compatible dims work on strided inputs.
  Tensor t = transpose(iota({2, 6}), 0, 1);   // [6, 2], strides [1, 6]
  Tensor split = view(t, {2, 3, 2});
  EXPECT_EQ(split.strides(), Strides({3, 1, 6}));
  EXPECT_TRUE(equal(split, reshape(contiguous(t), {2, 3, 2})));
}

TEST(Views, ReshapeCopiesOnlyWhenNeeded) {
  Tensor x = iota({2, 3, 4});
  EXPECT_TRUE(reshape(x, {4, 6}).is_same_storage(x));
  EXPECT_TRUE(reshape(x, {-1}).is_same_storage(x));
  Tensor t = transpose(x, 0, 2);  // [4, 3, 2]
  EXPECT_TRUE(reshape(t, {4, 3, 2}).is_same_storage(x));
  EXPECT_TRUE(reshape(t, {2, 2, 3, 2}).is_same_storage(x));  // splits dim 0 only
  Tensor copied = reshape(t, {-1});
  EXPECT_FALSE(copied.is_same_storage(x));
  EXPECT_TRUE(copied.is_contiguous());
  EXPECT_TRUE(equal(copied, reshape(contiguous(t), {24})));
  Tensor e = expand(iota({3, 1}), {3, 4});
  EXPECT_FALSE(reshape(e, {12}).is_same_storage(e));
  EXPECT_EQ(reshape(e, {12}).to_vector<float>(),
            std::vector<float>({0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}));
  // flatten and squeeze are reshapes too.
  EXPECT_FALSE(flatten(t).is_same_storage(x));
  EXPECT_TRUE(flatten(t, 1, 2).is_same_storage(x) == false);
  EXPECT_TRUE(squeeze(unsqueeze(t, 1)).is_same_storage(x));
}

TEST(Views, SliceClampsLikePython) {
  Tensor x = iota({5});
  auto vals = [](const Tensor& t) { return t.to_vector<float>(); };
  EXPECT_EQ(vals(slice(x, 0, -100, 100)), std::vector<float>({0, 1, 2, 3, 4}));
  EXPECT_EQ(vals(slice(x, 0, -2, 5)), std::vector<float>({3, 4}));
  EXPECT_EQ(vals(slice(x, 0, 1, -1, 2)), std::vector<float>({1, 3}));
  EXPECT_EQ(vals(slice(x, 0, 0, 5, 10)), std::vector<float>({0}));
  EXPECT_EQ(slice(x, 0, 4, 2).shape(), Shape({0}));
  EXPECT_EQ(slice(x, 0, 7, 9).shape(), Shape({0}));
  EXPECT_EQ(slice(x, 0, -1, -3).shape(), Shape({0}));
  EXPECT_EQ(x.slice(0, 3, INT64_MAX).to_vector<float>(), std::vector<float>({3, 4}));
}

TEST(Views, SqueezeUnsqueezeFlatten) {
  Tensor x = iota({1, 3, 1, 2});
  EXPECT_EQ(squeeze(x).shape(), Shape({3, 2}));
  EXPECT_EQ(squeeze(x, 2).shape(), Shape({1, 3, 2}));
  EXPECT_EQ(squeeze(x, -3).shape(), Shape({1, 3, 1, 2}));  // not size 1: unchanged
  EXPECT_EQ(squeeze(scalar_tensor(1.0)).shape(), Shape{});
  EXPECT_EQ(squeeze(noncontiguous(x)).strides(), Strides({1, 3}));
  EXPECT_EQ(unsqueeze(x, -1).shape(), Shape({1, 3, 1, 2, 1}));
  EXPECT_EQ(unsqueeze(x, 0).shape(), Shape({1, 1, 3, 1, 2}));
  EXPECT_EQ(unsqueeze(scalar_tensor(1.0), 0).shape(), Shape({1}));
  EXPECT_EQ(flatten(scalar_tensor(2.0)).shape(), Shape({1}));
  EXPECT_EQ(flatten(x, 1).shape(), Shape({1, 6}));
  EXPECT_EQ(flatten(x, -2, -1).shape(), Shape({1, 3, 2}));
  EXPECT_EQ(unflatten(iota({6, 2}), 0, {2, -1}).shape(), Shape({2, 3, 2}));
  Tensor t = noncontiguous(iota({2, 3}));
  EXPECT_EQ(t.t().strides(), Strides({2, 1}));
  EXPECT_TRUE(equal(unsqueeze(t, 1), reshape(contiguous(t), {2, 1, 3})));
}

TEST(Views, ContiguousCloneToCopy) {
  Tensor x = iota({2, 3});
  EXPECT_TRUE(contiguous(x).is_same(x));
  Tensor t = transpose(x, 0, 1);
  Tensor c = contiguous(t);
  EXPECT_FALSE(c.is_same_storage(x));
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_TRUE(equal(c, t));
  Tensor k = clone(x);
  EXPECT_FALSE(k.is_same_storage(x));
  EXPECT_TRUE(equal(k, x));
  EXPECT_TRUE(clone(t).is_contiguous());
  EXPECT_TRUE(to(x, kF32).is_same(x));
  EXPECT_TRUE(equal(to(tensor<float>({1.5f, -2.5f, 3.75f}), kI32), tensor<int32_t>({1, -2, 3})));
  EXPECT_TRUE(equal(to(tensor<double>({1.0 / 3}), kF32), tensor<float>({float(1.0 / 3)})));
  EXPECT_TRUE(equal(to(tensor<float>({0.f, 2.f}), kBool), tensor<bool>({false, true})));
  // copy_ broadcasts and converts into any layout.
  Tensor dst = zeros({3, 2});
  Tensor r = copy_(transpose(dst, 0, 1), tensor<double>({1, 2, 3}));
  EXPECT_TRUE(r.is_same_storage(dst));
  EXPECT_TRUE(equal(dst, tensor<float>({1, 1, 2, 2, 3, 3}, {3, 2})));
}

// ---------------------------------------------------------------------------
// Gradients
// ---------------------------------------------------------------------------

TEST(ViewGrad, ReshapingOps) {
  for (const Tensor& x : {leaf({2, 3, 4}, 1), noncontiguous(leaf({2, 3, 4}, 2))}) {
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return reshape(a[0], {4, -1}); }, {x});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return reshape(transpose(a[0], 0, 2), {-1}); }, {x});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return flatten(a[0], 1); }, {x});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return flatten(a[0]); }, {x});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return unflatten(a[0], -1, {2, 2}); }, {x});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return squeeze(unsqueeze(a[0], -2)); }, {x});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return squeeze(unsqueeze(a[0], 0), 0); }, {x});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return contiguous(transpose(a[0], 0, 1)); }, {x});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return clone(a[0]); }, {x});
  }
  EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return view(a[0], {3, 2, 2}); }, {leaf({12}, 3)});
  EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return squeeze(a[0]); }, {leaf({1, 3, 1}, 4)});
  EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return flatten(a[0]); }, {leaf({}, 5)});
  // 0-dim inputs stay on the tape through every view op.
  Tensor s = leaf({}, 6);
  for (const Tensor& t : {transpose(s, 0, -1), permute(s, {}), view(s, {1, 1}), squeeze(s), unsqueeze(s, 0),
                          expand(s, {2}), flatten(s), s.t()})
    EXPECT_TRUE(t.requires_grad() && !t.is_leaf()) << to_string(t.shape());
}

TEST(ViewGrad, Reordering) {
  for (const Tensor& x : {leaf({2, 3, 4}, 6), noncontiguous(leaf({2, 3, 4}, 7))}) {
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return transpose(a[0], 0, -1); }, {x});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return permute(a[0], {1, -1, 0}); }, {x});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return a[0].t(); }, {leaf({3, 2}, 8)});
  }
}

TEST(ViewGrad, Slicing) {
  for (const Tensor& x : {leaf({4, 5, 3}, 9), noncontiguous(leaf({4, 5, 3}, 10))}) {
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return narrow(a[0], 1, 1, 3); }, {x});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return narrow(a[0], -1, -2, 2); }, {x});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return slice(a[0], 1, 0, 5, 2); }, {x});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return slice(a[0], 0, -3, 100, 3); }, {x});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return slice(slice(a[0], 1, 1, -1, 2), 2, 1, 3); }, {x});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return select(a[0], 1, -2); }, {x});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return a[0][3]; }, {x});
  }
  // Second order: slice's vjp is itself recorded.
  EXPECT_GRADCHECK(
      [](const std::vector<Tensor>& a) {
        EnableGradGuard on;  // gradcheck evaluates under NoGradGuard
        Tensor y = slice(a[0], 0, 1, 4, 2);
        return grad({sum(mul(y, y))}, {a[0]}, {}, true, true)[0];
      },
      {leaf({5, 2}, 11)});
}

TEST(ViewGrad, Broadcasting) {
  for (const Tensor& x : {leaf({3, 1}, 12), noncontiguous(leaf({3, 1}, 13))}) {
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return expand(a[0], {2, 3, 4}); }, {x});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return broadcast_to(a[0], {3, 5}); }, {x});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return expand(a[0], {-1, 2}); }, {x});
  }
  EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return expand(a[0], {2, 3}); }, {leaf({}, 14)});
  for (const Tensor& x : {leaf({2, 3, 4}, 15), noncontiguous(leaf({2, 3, 4}, 16))}) {
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return sum_to(a[0], {3, 1}); }, {x});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return sum_to(a[0], {1, 4}); }, {x});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return sum_to(a[0], {}); }, {x});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return sum_to(a[0], {2, 1, 4}); }, {x});
  }
}

TEST(ViewGrad, ConversionsAndCopy) {
  // Through f32 and back: linear, so a wide step keeps f32 rounding small.
  EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return to(mul(to(a[0], kF32), 3.0), kF64); },
                   {leaf({2, 3}, 17)}, {.eps = 1e-2, .atol = 1e-4, .rtol = 1e-3});
  Tensor i = to(leaf({3}, 19), kI64);
  EXPECT_FALSE(i.requires_grad());
  // copy_ into a fresh non-leaf: dst's old values get zero gradient, src its
  // broadcast sum.
  Fn f = [](const std::vector<Tensor>& a) {
    Tensor dst = mul(a[0], 2.0);
    return mul(copy_(dst, a[1]), 3.0);
  };
  EXPECT_GRADCHECK(f, {leaf({2, 3}, 20), leaf({3}, 21)});
  EXPECT_GRADCHECK(f, {noncontiguous(leaf({2, 3}, 22)), leaf({1, 3}, 23)});
  EXPECT_GRADCHECK([](const std::vector<Tensor>& a) { return copy_(zeros({2, 2}, {.dtype = kF64}), a[0]); },
                   {leaf({2}, 24)});
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

TEST(ViewErrors, Messages) {
  Tensor x = zeros({2, 3});
  EXPECT_KILN_ERROR(view(x, {5, -1}), "[view] shape [5, -1] is invalid for input [2, 3] of 6 elements");
  EXPECT_KILN_ERROR(view(x, {-1, -1}), "[view] only one dim may be -1, got shape [-1, -1]");
  EXPECT_KILN_ERROR(reshape(x, {4}), "[reshape] shape [4] is invalid for input [2, 3] of 6 elements");
  EXPECT_KILN_ERROR(reshape(x, {-2, 3}), "[reshape] negative size -2 in shape [-2, 3]");
  EXPECT_KILN_ERROR(transpose(x, 0, 2), "[transpose] dim 2 out of range");
  EXPECT_KILN_ERROR(permute(x, {0}), "[permute] got 1 dims [0] for a tensor of shape [2, 3]");
  EXPECT_KILN_ERROR(permute(x, {1, -1}), "[permute] dim 1 repeated in [1, -1]");
  EXPECT_KILN_ERROR(narrow(x, 1, 2, 2), "[narrow] start 2 and length 2 are out of range for dim 1 of size 3");
  EXPECT_KILN_ERROR(narrow(scalar_tensor(1.0), 0, 0, 1), "[narrow] cannot narrow a 0-dim tensor");
  EXPECT_KILN_ERROR(slice(x, 0, 0, 2, 0), "[slice] step must be positive, got 0");
  EXPECT_KILN_ERROR(slice(x, 3, 0, 2), "[slice] dim 3 out of range");
  EXPECT_KILN_ERROR(select(x, 1, 3), "[select] index 3 is out of range for dim 1 of size 3");
  EXPECT_KILN_ERROR(select(x, 0, -3), "[select] index -3 is out of range for dim 0 of size 2");
  EXPECT_KILN_ERROR(expand(x, {3}), "[expand] cannot expand [2, 3] to fewer dims [3]");
  EXPECT_KILN_ERROR(expand(x, {4, 3}), "[expand] cannot expand [2, 3] to [4, 3] (dim 0: 2 vs 4)");
  EXPECT_KILN_ERROR(expand(x, {-1, 2, 3}), "[expand] size -1 is not allowed for the new leading dim 0");
  EXPECT_KILN_ERROR(squeeze(x, 2), "[squeeze] dim 2 out of range");
  EXPECT_KILN_ERROR(unsqueeze(x, 3), "[unsqueeze] dim 3 out of range");
  EXPECT_KILN_ERROR(flatten(zeros({2, 3, 4}), 2, 1), "[flatten] start_dim 2 comes after end_dim 1");
  EXPECT_KILN_ERROR(unflatten(x, 1, {2, -1}), "[unflatten] shape [2, -1] is invalid for input [3] of 3 elements");
  EXPECT_KILN_ERROR(sum_to(x, {1, 2, 3}), "[sum_to] cannot sum [2, 3] to the larger shape [1, 2, 3]");
  EXPECT_KILN_ERROR(sum_to(x, {2}), "[sum_to] cannot sum [2, 3] to [2] (dim 1: 3 vs 2)");
  EXPECT_KILN_ERROR(x.t().t().t().view({6}), "use reshape()");
  EXPECT_KILN_ERROR(zeros({2, 3, 4}).t(), "[t] expects a tensor with <= 2 dims, got [2, 3, 4]");
}

TEST(ViewErrors, UndefinedInput) {
  const Tensor u;
  EXPECT_KILN_ERROR(view(u, {1}), "[view] input is an undefined tensor");
  EXPECT_KILN_ERROR(reshape(u, {1}), "[reshape] input is an undefined tensor");
  EXPECT_KILN_ERROR(transpose(u, 0, 1), "[transpose] input is an undefined tensor");
  EXPECT_KILN_ERROR(permute(u, {0}), "[permute] input is an undefined tensor");
  EXPECT_KILN_ERROR(narrow(u, 0, 0, 1), "[narrow] input is an undefined tensor");
  EXPECT_KILN_ERROR(slice(u, 0, 0, 1), "[slice] input is an undefined tensor");
  EXPECT_KILN_ERROR(select(u, 0, 0), "[select] input is an undefined tensor");
  EXPECT_KILN_ERROR(expand(u, {2}), "[expand] input is an undefined tensor");
  EXPECT_KILN_ERROR(squeeze(u), "[squeeze] input is an undefined tensor");
  EXPECT_KILN_ERROR(unsqueeze(u, 0), "[unsqueeze] input is an undefined tensor");
  EXPECT_KILN_ERROR(flatten(u), "[flatten] input is an undefined tensor");
  EXPECT_KILN_ERROR(contiguous(u), "[contiguous] input is an undefined tensor");
  EXPECT_KILN_ERROR(clone(u), "[clone] input is an undefined tensor");
  EXPECT_KILN_ERROR(to(u, kF64), "[to] input is an undefined tensor");
  EXPECT_KILN_ERROR(sum_to(u, {1}), "[sum_to] input is an undefined tensor");
  EXPECT_KILN_ERROR(copy_(zeros({1}), u), "[copy_] src is an undefined tensor");
  EXPECT_KILN_ERROR(copy_(u, zeros({1})), "[copy_] self is an undefined tensor");
}

TEST(ViewErrors, CopyInto) {
  Tensor dst = zeros({2, 3});
  EXPECT_KILN_ERROR(copy_(dst, zeros({4})), "[copy_] shapes [2, 3] and [4] cannot be broadcast");
  EXPECT_KILN_ERROR(copy_(dst, zeros({2, 2, 3})), "[copy_] source [2, 2, 3] does not broadcast to destination [2, 3]");
  EXPECT_TRUE(equal(dst, zeros({2, 3})));  // untouched
  Tensor p = leaf({3}, 1);
  EXPECT_KILN_ERROR(copy_(p, zeros({3})), "[copy_] a leaf tensor of shape [3] that requires grad cannot be modified in place");
  EXPECT_KILN_ERROR(copy_(narrow(zeros({4}, {.dtype = kF64}), 0, 0, 3), p),
                    "[copy_] in-place write into a view of shape [3] that takes part in autograd is not supported");
}

}  // namespace
}  // namespace kiln
