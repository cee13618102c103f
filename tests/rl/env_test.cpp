// The environment contract's value types (kiln/rl/env.h): spaces and Transition::done.
#include <gtest/gtest.h>

#include "tests/support/rl_testing.h"

namespace kiln::rl {
namespace {

TEST(RlSpace, BoxDiscreteBinaryDescribeThemselves) {
  Space box = Space::box({4}, {-1, -2, -3, -4}, {1, 2, 3, 4});
  EXPECT_EQ(box.numel(), 4);
  EXPECT_EQ(box.to_string(), "Box([4], f32)");
  Space d = Space::discrete(2);
  EXPECT_EQ(d.dtype, kI64);
  EXPECT_EQ(d.numel(), 1);
  EXPECT_EQ(d.to_string(), "Discrete(2)");
  EXPECT_EQ(Space::binary({3}).to_string(), "Binary([3])");
}

TEST(RlSpace, BatchMatchesChecksDtypeAndTrailingShape) {
  Space box = Space::box({4}, {0, 0, 0, 0}, {1, 1, 1, 1});
  EXPECT_TRUE(box.batch_matches(zeros({8, 4})));
  EXPECT_FALSE(box.batch_matches(zeros({8, 3})));
  EXPECT_FALSE(box.batch_matches(zeros({4})));
  EXPECT_FALSE(box.batch_matches(zeros({8, 4}, {.dtype = kF64})));
  Space d = Space::discrete(2);
  EXPECT_TRUE(d.batch_matches(zeros({8}, {.dtype = kI64})));
  EXPECT_FALSE(d.batch_matches(zeros({8, 1}, {.dtype = kI64})));
}

TEST(RlSpace, BadBoundsAreErrors) {
  EXPECT_KILN_ERROR(Space::box({2}, {0}, {1, 1}), "[Space.box] shape [2] has 2 elements but low has 1 and high 2");
  EXPECT_KILN_ERROR(Space::box({1}, {2}, {1}), "[Space.box] low[0] = 2 is above high[0] = 1");
  EXPECT_KILN_ERROR(Space::discrete(0), "[Space.discrete] n must be positive, got 0");
}

TEST(RlTransition, DoneIsTerminatedOrTruncated) {
  Transition t;
  t.terminated = tensor(std::vector<bool>{true, false, false});
  t.truncated = tensor(std::vector<bool>{false, true, false});
  EXPECT_EQ(t.done().to_vector<bool>(), (std::vector<bool>{true, true, false}));
}

}  // namespace
}  // namespace kiln::rl
