// RotaryEmbedding: the module over rotary_embedding (the op's values are tested
// against a PyTorch reference in tests/ops/rotary_test.cpp).
#include "kiln/nn/rotary.h"

#include <gtest/gtest.h>

#include "tests/support/nn_testing.h"

namespace kiln::nn {
namespace {
using namespace testing;

TEST(RotaryEmbedding, RotatesHeadsByPosition) {
  Generator gen(0);
  RotaryEmbedding rope(8, {.base = 100});
  Tensor q = randn({2, 3, 5, 8}, gen);  // [B, H, T, Dh]
  EXPECT_TRUE(equal(rope.forward(q), rotary_embedding(q, {.base = 100})));
  EXPECT_TRUE(equal(rope.forward(q, 4), rotary_embedding(q, {.base = 100, .offset = 4})));
  Tensor pos = arange(3, 8);
  EXPECT_TRUE(all_close(rope.forward(q, pos), rope.forward(q, 3)));
  // Position 0 is the identity; norms are kept.
  EXPECT_TRUE(all_close(rope.forward(q).select(2, 0), q.select(2, 0)));
  EXPECT_TRUE(all_close(sum(square(rope.forward(q)), {-1}), sum(square(q), {-1})));
}

TEST(RotaryEmbedding, PackedHeadsEqualSplitHeads) {
  Generator gen(1);
  RotaryEmbedding rope(4, {.rotary_dim = 2, .interleaved = true});
  Tensor x = randn({2, 6, 3 * 4}, gen);  // [B, T, H*Dh]
  Tensor split = x.reshape({2, 6, 3, 4}).transpose(1, 2);  // [B, H, T, Dh]
  Tensor expect = rope.forward(split, 2).transpose(1, 2).reshape({2, 6, 12});
  EXPECT_TRUE(all_close(rope.forward_packed(x, 3, 2), expect));
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return rope.forward_packed(in[0], 3, 1); },
                   {leaf({1, 4, 12}, 2)});
}

TEST(RotaryEmbedding, Errors) {
  EXPECT_KILN_ERROR(RotaryEmbedding(7), "[RotaryEmbedding] head_dim 7 must be positive and even");
  EXPECT_KILN_ERROR(RotaryEmbedding(8, {.rotary_dim = 10}), "rotary_dim 10 must be even, positive and at most head_dim 8");
  RotaryEmbedding rope(8);
  EXPECT_KILN_ERROR(rope.forward(ones({2, 5, 6})), "[RotaryEmbedding] input [2, 5, 6] must be [..., T, 8] (head_dim 8)");
  EXPECT_KILN_ERROR(rope.forward_packed(ones({2, 5, 20}), 3),
                    "[RotaryEmbedding.forward_packed] input [2, 5, 20] must be [..., T, 24] (head_dim 8 x 3 heads)");
  EXPECT_EQ(rope.repr(), "RotaryEmbedding(head_dim=8, base=10000, rotary_dim=8, interleaved=false)");
}

}  // namespace
}  // namespace kiln::nn
