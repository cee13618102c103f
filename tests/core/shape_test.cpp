// Shape (small vector with 6 inline dims), strides, dim wrapping and
// broadcasting rules.
#include "tests/support/test_util.h"

namespace kiln {
namespace {

TEST(Shape, InlineBasics) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.size(), 3u);
  EXPECT_FALSE(s.empty());
  EXPECT_EQ(s[1], 3);
  EXPECT_EQ(s.back(), 4);
  EXPECT_EQ(s.vec(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(numel(s), 24);
  EXPECT_EQ(numel(Shape{}), 1);
  EXPECT_EQ(numel(Shape{3, 0}), 0);
  EXPECT_TRUE(Shape{}.empty());
  EXPECT_EQ(Shape::filled(4, 7), (Shape{7, 7, 7, 7}));
  EXPECT_EQ(Shape(std::vector<int64_t>{1, 2}), (Shape{1, 2}));
}

TEST(Shape, GrowsPastSixDims) {
  Shape s;
  for (int64_t i = 1; i <= 9; ++i) s.push_back(i);
  ASSERT_EQ(s.size(), 9u);
  for (int64_t i = 0; i < 9; ++i) EXPECT_EQ(s[size_t(i)], i + 1);
  EXPECT_EQ(numel(s), 362880);

  Shape copy = s;  // deep copy of the heap buffer
  copy[0] = 100;
  EXPECT_EQ(s[0], 1);
  EXPECT_EQ(copy[8], 9);

  Shape moved = std::move(copy);  // steals the buffer
  EXPECT_EQ(moved.size(), 9u);
  EXPECT_EQ(moved[0], 100);
  EXPECT_TRUE(copy.empty());  // NOLINT: moved-from is empty by contract

  Shape small{1, 2};
  small = s;  // inline -> heap by assignment
  EXPECT_EQ(small, s);
  s = Shape{5};  // heap -> shorter
  EXPECT_EQ(s, Shape{5});
  s = std::move(small);
  EXPECT_EQ(s.size(), 9u);
}

TEST(Shape, InsertEraseResize) {
  Shape s{1, 2, 3, 4, 5, 6};  // full inline
  s.insert(0, 0);             // spills to the heap
  EXPECT_EQ(s, (Shape{0, 1, 2, 3, 4, 5, 6}));
  s.insert(7, 7);
  s.insert(3, 42);
  EXPECT_EQ(s, (Shape{0, 1, 2, 42, 3, 4, 5, 6, 7}));
  s.erase(3);
  s.erase(0);
  EXPECT_EQ(s, (Shape{1, 2, 3, 4, 5, 6, 7}));
  s.resize(2);
  EXPECT_EQ(s, (Shape{1, 2}));
  s.resize(4, 9);
  EXPECT_EQ(s, (Shape{1, 2, 9, 9}));
  EXPECT_NE(s, (Shape{1, 2, 9}));
}

TEST(Shape, ToString) {
  EXPECT_EQ(to_string(Shape{2, 3, 4}), "[2, 3, 4]");
  EXPECT_EQ(to_string(Shape{}), "[]");
  EXPECT_EQ(to_string(Shape{7}), "[7]");
}

TEST(Shape, ContiguousStrides) {
  EXPECT_EQ(contiguous_strides(Shape{2, 3, 4}), (Strides{12, 4, 1}));
  EXPECT_EQ(contiguous_strides(Shape{5}), (Strides{1}));
  EXPECT_EQ(contiguous_strides(Shape{}), Strides{});
  // Zero-size dims count as 1 so strides stay valid.
  EXPECT_EQ(contiguous_strides(Shape{2, 0, 3}), (Strides{3, 3, 1}));
  Shape big{2, 1, 3, 1, 2, 2, 2, 3};
  EXPECT_EQ(contiguous_strides(big), (Strides{72, 72, 24, 24, 12, 6, 3, 1}));  // 8 dims: on the heap
}

TEST(Shape, WrapDim) {
  EXPECT_EQ(wrap_dim("op", -1, 3), 2);
  EXPECT_EQ(wrap_dim("op", -3, 3), 0);
  EXPECT_EQ(wrap_dim("op", 2, 3), 2);
  EXPECT_EQ(wrap_dim("op", 0, 0), 0);  // scalars accept 0 and -1
  EXPECT_EQ(wrap_dim("op", -1, 0), 0);
  EXPECT_KILN_ERROR(wrap_dim("softmax", 3, 3), "[softmax] dim 3 out of range for a tensor with 3 dims");
  EXPECT_KILN_ERROR(wrap_dim("sum", -4, 3), "[sum] dim -4 out of range");
  EXPECT_KILN_ERROR(wrap_dim("sum", 1, 0), "dim 1 out of range for a tensor with 0 dims");
}

TEST(Shape, Broadcast) {
  EXPECT_EQ(broadcast_shapes("add", Shape{2, 1, 4}, Shape{3, 1}), (Shape{2, 3, 4}));
  EXPECT_EQ(broadcast_shapes("add", Shape{}, Shape{5}), Shape{5});
  EXPECT_EQ(broadcast_shapes("add", Shape{0, 1}, Shape{3}), (Shape{0, 3}));
  EXPECT_EQ(broadcast_shapes("add", Shape{1, 1, 1, 1, 1, 1, 1, 2}, Shape{3, 1}),
            (Shape{1, 1, 1, 1, 1, 1, 3, 2}));
}

TEST(Shape, BroadcastErrorsNameOpShapesAndDim) {
  EXPECT_KILN_ERROR(broadcast_shapes("add", Shape{2, 3}, Shape{4}),
                    "[add] shapes [2, 3] and [4] cannot be broadcast (dim -1: 3 vs 4)");
  EXPECT_KILN_ERROR(broadcast_shapes("mul", Shape{2, 3, 4}, Shape{5, 4}), "dim -2: 3 vs 5");
  EXPECT_KILN_ERROR(broadcast_shapes("where", Shape{0}, Shape{2}), "[where] shapes [0] and [2]");
}

}  // namespace
}  // namespace kiln
