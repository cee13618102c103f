// grad() of an output that is the input leaf itself is ones, as in PyTorch.
#include "tests/support/autograd_testing.h"

namespace kiln {

TEST(Engine, GradOfLeafWithRespectToItselfIsOnes) {
  Tensor x = testing::leaf({2, 3}, 7);
  std::vector<Tensor> g = grad({x}, {x}, {ones_like(x)});
  ASSERT_TRUE(g[0].defined());
  EXPECT_TRUE(testing::equal(g[0], ones_like(x)));
}

}  // namespace kiln
