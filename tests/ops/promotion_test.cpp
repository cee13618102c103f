// Tests of result_type and can_cast (kiln/ops/promotion.h) against a table of
// PyTorch's torch.result_type over every dtype pair, 0-dim tensors and numbers.
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;

DType dtype_named(const std::string& s) {
  for (DType t : {kBool, kU8, kI32, kI64, kBF16, kF32, kF64})
    if (name(t) == s) return t;
  ADD_FAILURE() << "unknown dtype " << s;
  return kF32;
}

// "<dtype>[d]": a [2] tensor; "<dtype>[]": a 0-dim tensor.
Tensor operand(const std::string& desc) {
  bool zero_dim = desc.ends_with("[]");
  std::string dt = desc.substr(0, desc.size() - (zero_dim ? 2 : 3));
  return ones(zero_dim ? Shape{} : Shape{2}, {.dtype = dtype_named(dt)});
}

Scalar number(const std::string& desc) {
  if (desc == "int") return Scalar(3);
  if (desc == "float") return Scalar(2.5);
  return Scalar(true);
}

TEST(Promotion, ResultTypeMatchesTorchTable) {
  int n = 0;
  for (const auto& row : golden("elementwise_promotion")) {
    std::string a = row[0], b = row[1];
    DType want = dtype_named(row[2]);
    Tensor ta = operand(a);
    bool scalar = b == "int" || b == "float" || b == "bool";
    DType got = scalar ? result_type(ta, number(b)) : result_type(ta, operand(b));
    EXPECT_EQ(name(got), name(want)) << a << " with " << b;
    // The ops follow result_type.
    Tensor sum = scalar ? add(ta, number(b)) : add(ta, operand(b));
    EXPECT_EQ(name(sum.dtype()), name(want)) << "add " << a << " with " << b;
    Tensor cmp = scalar ? lt(ta, number(b)) : lt(ta, operand(b));
    EXPECT_EQ(cmp.dtype(), kBool);
    ++n;
  }
  EXPECT_EQ(n, 14 * 17);
}

TEST(Promotion, ExamplesFromTheHeader) {
  EXPECT_EQ(result_type(zeros({2}), 2.5), kF32);
  EXPECT_EQ(result_type(zeros({2}, {.dtype = kI64}), 2.5), kF32);
  EXPECT_EQ(result_type(zeros({2}, {.dtype = kU8}), zeros({}, {.dtype = kI64})), kU8);
  EXPECT_EQ(result_type(zeros({2}, {.dtype = kBool}), 3), kI64);
  EXPECT_EQ(result_type(zeros({2}, {.dtype = kI32}), 3, 2.5), kF32);
  EXPECT_EQ(result_type(zeros({2}, {.dtype = kBF16}), zeros({}, {.dtype = kF64})), kBF16);
  EXPECT_EQ(result_type(zeros({2}, {.dtype = kI64}), zeros({}, {.dtype = kF64})), kF64);
  // Division of integers is true division in f32.
  EXPECT_EQ(div(zeros({2}, {.dtype = kI64}), ones({2}, {.dtype = kI32})).dtype(), kF32);
}

TEST(Promotion, CanCast) {
  EXPECT_TRUE(can_cast(kI64, kF32));
  EXPECT_TRUE(can_cast(kF64, kBF16));
  EXPECT_TRUE(can_cast(kBool, kU8));
  EXPECT_FALSE(can_cast(kF32, kI64));
  EXPECT_FALSE(can_cast(kI32, kBool));
  EXPECT_FALSE(can_cast(kBF16, kU8));
}

}  // namespace
}  // namespace kiln
