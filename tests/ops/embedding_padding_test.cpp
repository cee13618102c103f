// embedding's padding_idx: the rows looked up at padding_idx get no gradient
// (PyTorch parity is in tests/nn/embedding_test.cpp); other rows as without it.
#include <gtest/gtest.h>

#include "tests/support/ops_testing.h"

namespace kiln {
namespace {
using namespace testing;

TEST(EmbeddingPadding, PaddingRowGetsNoGradient) {
  Tensor idx = tensor<int64_t>({2, 0, 2, 3, 1, 2}, {2, 3});
  for (int64_t pad : {2, -2}) {  // -2 is row 2 of 4
    Tensor w = leaf({4, 3}, 1);
    Tensor w_ref = leaf({4, 3}, 1);
    Tensor g = leaf({2, 3, 3}, 2).detach();
    Tensor out = embedding(w, idx, pad);
    EXPECT_TRUE(equal(out.detach(), embedding(w_ref, idx).detach()));  // the forward is unchanged
    backward({out}, {g});
    backward({embedding(w_ref, idx)}, {g});
    // Reference: the plain gradient with row 2 zeroed.
    Tensor keep = tensor<double>({1, 1, 0, 1}, {4, 1});
    EXPECT_TRUE(all_close(w.grad(), w_ref.grad() * keep, 1e-12, 1e-12)) << "padding_idx " << pad;
    EXPECT_TRUE(equal(w.grad().select(0, 2), zeros({3}, {.dtype = kF64})));
  }
  // Non-padding rows: the gradcheck holds (padding row 3 is never looked up here).
  Tensor w = leaf({4, 2}, 3);
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return embedding(in[0], tensor<int64_t>({0, 1, 1, 2}), 3); },
                   {w});
}

TEST(EmbeddingPadding, BadPaddingIdx) {
  Tensor w = ones({4, 2});
  Tensor idx = tensor<int64_t>({0, 1});
  EXPECT_KILN_ERROR(embedding(w, idx, 4), "[embedding] padding_idx 4 is out of range for 4 embeddings (weight [4, 2])");
  EXPECT_KILN_ERROR(embedding(w, idx, -5), "[embedding] padding_idx -5 is out of range for 4 embeddings");
}

}  // namespace
}  // namespace kiln
