// Creation ops against PyTorch goldens (tools/goldens/core.py), and their
// argument checks.
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;

Tensor expected(const std::string& key) { return golden_tensor(testing::golden("core").at("creation").at(key)); }

TEST(Creation, FilledMatchTorch) {
  EXPECT_TRUE(equal(zeros({2, 3}), expected("zeros_2x3")));
  EXPECT_TRUE(equal(ones({3}, {.dtype = kF64}), expected("ones_f64")));
  EXPECT_TRUE(equal(full({2, 2}, 3.5), expected("full_f32")));
  EXPECT_TRUE(equal(full({3}, 7, {.dtype = kI32}), expected("full_i32")));
}

TEST(Creation, ArangeMatchesTorch) {
  EXPECT_TRUE(equal(arange(5), expected("arange_5")));
  EXPECT_TRUE(equal(arange(1, 2.5, 0.5), expected("arange_1_2.5_0.5")));
  EXPECT_TRUE(equal(arange(0, 1, 0.1), expected("arange_0_1_0.1")));
  EXPECT_TRUE(equal(arange(10, 0, -3), expected("arange_10_0_-3")));
  EXPECT_TRUE(equal(arange(-1, 1, 0.25, {.dtype = kF64}), expected("arange_f64")));
  EXPECT_EQ(arange(0).numel(), 0);
}

TEST(Creation, LinspaceMatchesTorch) {
  EXPECT_TRUE(all_close(linspace(0, 1, 5), expected("linspace_0_1_5"), 0, 0));
  EXPECT_TRUE(all_close(linspace(-2.5, 7.3, 11), expected("linspace_-2.5_7.3_11"), 1e-7, 1e-7));
  EXPECT_TRUE(all_close(linspace(-1, 1, 7, {.dtype = kF64}), expected("linspace_f64"), 1e-15, 1e-15));
  EXPECT_TRUE(equal(linspace(3, 10, 1), expected("linspace_1")));
  EXPECT_EQ(linspace(0, 1, 0).numel(), 0);
  // Both endpoints are exact.
  auto v = linspace(-2.5, 7.3, 11, {.dtype = kF64}).to_vector<double>();
  EXPECT_EQ(v.front(), -2.5);
  EXPECT_EQ(v.back(), 7.3);
}

TEST(Creation, EyeMatchesTorch) {
  EXPECT_TRUE(equal(eye(3), expected("eye_3")));
  EXPECT_TRUE(equal(eye(2, 4), expected("eye_2x4")));
  EXPECT_TRUE(equal(eye(3, 2, {.dtype = kF64}), expected("eye_3x2_f64")));
}

TEST(Creation, LikeAndOptions) {
  Tensor a = zeros({2, 5}, {.dtype = kBF16});
  EXPECT_EQ(zeros_like(a).dtype(), kBF16);
  EXPECT_EQ(ones_like(a).to_vector<float>(), std::vector<float>(10, 1.0f));
  EXPECT_EQ(full_like(a, -2).to_vector<float>(), std::vector<float>(10, -2.0f));
  EXPECT_EQ(empty_like(a).shape(), a.shape());
  EXPECT_EQ(full({2}, true, {.dtype = kBool}).to_vector<bool>(), (std::vector<bool>{true, true}));
  EXPECT_EQ(full({2}, 300, {.dtype = kU8}).dtype(), kU8);
  Tensor g = zeros({3}, {.requires_grad = true});
  EXPECT_TRUE(g.requires_grad());
  EXPECT_TRUE(g.is_leaf());
  EXPECT_EQ(empty({0, 4}).numel(), 0);
}

TEST(Creation, Errors) {
  EXPECT_KILN_ERROR(arange(0, 5, 0), "[arange] step must be nonzero");
  EXPECT_KILN_ERROR(arange(5, 0, 1), "[arange] upper bound 0 and step 1 are inconsistent with start 5");
  EXPECT_KILN_ERROR(linspace(0, 1, -1), "[linspace] number of steps must be non-negative, got -1");
  EXPECT_KILN_ERROR(eye(-2), "[eye] n must be non-negative, got -2");
  EXPECT_KILN_ERROR(zeros({-1}), "[zeros] negative size -1 in shape [-1]");
  EXPECT_KILN_ERROR(zeros({2}, {.dtype = kI64, .requires_grad = true}),
                    "only floating-point tensors can require gradients, got i64");
}

}  // namespace
}  // namespace kiln
