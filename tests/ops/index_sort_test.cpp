// Tests of sort, argsort and topk (kiln/ops/index.h): PyTorch goldens with
// ties and NaN, stability, large parallel rows, gradchecks, errors.
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;

Tensor o(const std::string& name) { return golden_tensor(golden("index_order").at(name)); }

void expect_pair(const std::pair<Tensor, Tensor>& got, const std::string& name) {
  EXPECT_TRUE(equal(got.first, o(name + "_values"))) << name;
  EXPECT_TRUE(equal(got.second, o(name + "_indices"))) << name;
}

TEST(Sort, MatchesTorch) {
  Tensor x = o("x");
  for (const Tensor& xl : {x, noncontiguous(x)}) {
    expect_pair(topk(xl, 3), "topk_3");
    expect_pair(topk(xl, 2, 0, /*largest=*/false), "topk_2_d0_small");
    expect_pair(sort(xl), "sort");
    expect_pair(sort(xl, 0, /*descending=*/true), "sort_d0_desc");
  }
}

TEST(Sort, StableWithTiesAndNaN) {
  // NaN sorts as the largest value; equal values keep their order.
  expect_pair(sort(o("ties")), "sort_ties");
  expect_pair(sort(o("ties"), -1, true), "sort_ties_desc");
  expect_pair(sort(o("ints")), "sort_ints");
  expect_pair(sort(o("ints"), 1, true), "sort_ints_desc");
  EXPECT_TRUE(equal(argsort(o("ties")), o("argsort_ties")));
  EXPECT_TRUE(equal(sort(to(o("ties"), kBF16)).second, o("sort_ties_indices")));
  // topk of NaN-holding rows: NaN counts as the largest.
  auto [v, i] = topk(tensor<float>({3, NAN, 1, 2}), 2);
  EXPECT_TRUE(equal(i, tensor<int64_t>({1, 0})));
  EXPECT_TRUE(std::isnan(v.to_vector<float>()[0]));
}

TEST(Sort, EdgeShapes) {
  auto [v, i] = sort(scalar_tensor(4.0));
  EXPECT_EQ(v.shape(), Shape{});
  EXPECT_EQ(i.item<int64_t>(), 0);
  EXPECT_EQ(topk(zeros({3, 4}), 0, 1).first.shape(), Shape({3, 0}));
  EXPECT_EQ(sort(zeros({0, 5}), 1).second.shape(), Shape({0, 5}));
  EXPECT_EQ(argsort(zeros({2, 0})).shape(), Shape({2, 0}));
  EXPECT_EQ(sort(tensor<bool>({true, false, true})).second.to_vector<int64_t>(), std::vector<int64_t>({1, 0, 2}));
}

TEST(Sort, LargeRowsAreSortedPermutations) {
  Generator gen(5);
  Tensor x = randn({64, 3000}, gen);
  for (int64_t dim : {1, 0}) {
    auto [v, i] = sort(x, dim, true);
    // values == x gathered at the indices, and non-increasing along dim.
    EXPECT_TRUE(equal(gather(x, dim, i), v));
    Tensor head = narrow(v, dim, 0, v.size(dim) - 1), tail = narrow(v, dim, 1, v.size(dim) - 1);
    EXPECT_TRUE(all(ge(head, tail)).item<bool>());
    // Each row of indices is a permutation: sorting it gives 0..n-1.
    Tensor ramp = expand(reshape(arange(x.size(dim)), dim == 1 ? Shape{1, -1} : Shape{-1, 1}), x.shape());
    EXPECT_TRUE(equal(sort(i, dim).first, contiguous(ramp)));
    auto [tv, ti] = topk(x, 7, dim);
    EXPECT_TRUE(equal(tv, narrow(v, dim, 0, 7)));
    EXPECT_TRUE(equal(ti, narrow(i, dim, 0, 7)));
  }
}

TEST(SortGrad, ValuesAreDifferentiable) {
  Tensor x = leaf({3, 5}, 1);
  EXPECT_GRADCHECK([](const std::vector<Tensor>& v) { return sort(v[0]).first; }, {x});
  EXPECT_GRADCHECK([](const std::vector<Tensor>& v) { return sort(v[0], 0, true).first; }, {noncontiguous(x)});
  EXPECT_GRADCHECK([](const std::vector<Tensor>& v) { return topk(v[0], 2).first; }, {x});
  EXPECT_GRADCHECK([](const std::vector<Tensor>& v) { return topk(v[0], 2, -2, false).first; }, {noncontiguous(x)});
  EXPECT_GRADCHECK([](const std::vector<Tensor>& v) { return topk(v[0], 1, 0).first; }, {leaf({4}, 2)});
  // Second order: the vjp is a scatter, itself differentiable.
  EXPECT_GRADCHECK(
      [](const std::vector<Tensor>& v) {
        EnableGradGuard on;  // gradcheck evaluates under NoGradGuard
        Tensor y = topk(v[0], 3).first;
        return grad({sum(mul(y, y))}, {v[0]}, {}, true, true)[0];
      },
      {leaf({2, 5}, 3)});
  Tensor a = leaf({4}, 4);
  EXPECT_FALSE(argsort(a).requires_grad());
  EXPECT_FALSE(sort(a).second.requires_grad());
}

TEST(SortErrors, Messages) {
  Tensor x = zeros({3, 4});
  EXPECT_KILN_ERROR(topk(x, 5), "[topk] k 5 is out of range for dim 1 of size 4 (input [3, 4])");
  EXPECT_KILN_ERROR(topk(x, -1, 0), "[topk] k -1 is out of range for dim 0 of size 3");
  EXPECT_KILN_ERROR(topk(x, 1, 2), "[topk] dim 2 out of range");
  EXPECT_KILN_ERROR(sort(x, -3), "[sort] dim -3 out of range");
  EXPECT_KILN_ERROR(argsort(x, 2), "[argsort] dim 2 out of range");
  EXPECT_KILN_ERROR(sort(Tensor()), "[sort] input is an undefined tensor");
}

}  // namespace
}  // namespace kiln
