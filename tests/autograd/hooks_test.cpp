// Post-accumulate-grad hooks: run once per backward per leaf, after the
// leaf's grad() holds the sum of every consumer's contribution.
#include "tests/support/autograd_testing.h"

namespace kiln {
namespace {

TEST(PostAccumulateGradHook, RunsOnceWithTheFinalGradient) {
  Tensor w = tensor({1.0f, 2.0f, 3.0f}).requires_grad_();
  std::vector<std::vector<float>> seen;
  auto h = autograd::register_post_accumulate_grad_hook(w, [&](const Tensor& leaf) {
    seen.push_back(leaf.grad().to_vector<float>());
  });
  // w is used twice: d/dw sum(w * w + 3 w) = 2 w + 3, summed before the hook runs.
  Tensor loss = sum(add(mul(w, w), mul(w, 3.0)));
  loss.backward();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (std::vector<float>{5, 7, 9}));
  // A second backward accumulates into grad(): the hook sees the running sum.
  sum(w).backward();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], (std::vector<float>{6, 8, 10}));
  autograd::remove_post_accumulate_grad_hook(w, h);
  sum(w).backward();
  EXPECT_EQ(seen.size(), 2u);
}

TEST(PostAccumulateGradHook, RunsInBackwardOrderAndNotForGrad) {
  Tensor a = tensor({1.0f}).requires_grad_(), b = tensor({2.0f}).requires_grad_();
  std::vector<char> order;
  autograd::register_post_accumulate_grad_hook(a, [&](const Tensor&) { order.push_back('a'); });
  autograd::register_post_accumulate_grad_hook(b, [&](const Tensor&) { order.push_back('b'); });
  Tensor h = mul(a, 2.0);          // a first in the forward
  Tensor loss = sum(mul(h, b));    // b's node is the later one: its gradient is final first
  kiln::grad({loss}, {a, b}, {}, /*retain_graph=*/true);
  EXPECT_TRUE(order.empty());      // grad() leaves grad() and the hooks alone
  loss.backward();
  EXPECT_EQ(order, (std::vector<char>{'b', 'a'}));
}

TEST(PostAccumulateGradHook, RefusesNonLeaves) {
  Tensor a = tensor({1.0f}).requires_grad_();
  Tensor h = mul(a, 2.0);
  EXPECT_THROW(autograd::register_post_accumulate_grad_hook(h, [](const Tensor&) {}), Error);
  EXPECT_THROW(autograd::register_post_accumulate_grad_hook(tensor({1.0f}), [](const Tensor&) {}), Error);
}

}  // namespace
}  // namespace kiln
