// Tests of nn::init::orthogonal against torch.nn.init.orthogonal_'s
// definition: gain * Q of the QR decomposition (R's diagonal positive) of a
// standard-normal [rows, cols] matrix, transposed when rows < cols. The test
// redraws that matrix from the same generator and checks Q R = A with R upper
// triangular and positive on the diagonal (which makes Q unique), and the
// orthonormality of the rows or columns.
#include <cmath>

#include "tests/support/nn_testing.h"

namespace kiln::nn {
namespace {

using kiln::testing::all_close;

// W [rows, cols] as f64 and the normal matrix A it was made from (same seed).
struct Drawn {
  Tensor w, a;
};
Drawn draw(const Shape& shape, double gain, uint64_t seed, DType dtype = kF64) {
  Generator g(seed), g2(seed);
  Tensor w = init::orthogonal(gain)(shape, Fan{}, g, dtype);
  const int64_t rows = shape[0];
  Tensor a = randn({rows, w.numel() / rows}, g2, {.dtype = kF64});
  return {w.to(kF64).reshape({rows, -1}), a};
}

TEST(InitOrthogonal, IsTheQFactorOfTorchsQrWithPositiveDiagonal) {
  for (Shape shape : {Shape{5, 3}, Shape{3, 5}, Shape{4, 4}, Shape{6, 2, 3, 3}, Shape{64, 4}, Shape{2, 64}}) {
    SCOPED_TRACE(to_string(shape));
    auto [w, a] = draw(shape, 2.0, 7);
    Tensor q = w / 2.0;
    // Tall (rows >= cols): A = Q R. Wide: A^T = Q^T R.
    const bool wide = shape[0] < q.size(1);
    Tensor qt = wide ? q.t() : q, at = wide ? a.t() : a;  // [m, n], m >= n
    Tensor r = matmul(qt.t(), at);                        // [n, n]
    EXPECT_TRUE(all_close(matmul(qt, r), at, 1e-12, 1e-12));
    const int64_t n = r.size(0);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_GT(r[i][i].item<double>(), 0.0);
      for (int64_t j = 0; j < i; ++j) EXPECT_NEAR(r[i][j].item<double>(), 0.0, 1e-12);
    }
    // gain^2 I over the fewer of rows and columns.
    Tensor gram = wide ? matmul(w, w.t()) : matmul(w.t(), w);
    EXPECT_TRUE(all_close(gram, eye(n, -1, {.dtype = kF64}) * 4.0, 1e-12, 1e-12));
  }
}

TEST(InitOrthogonal, ThreadsThroughInitAndKeepsTheDtype) {
  Rngs rngs(3), rngs2(3);
  Init init(rngs);
  init.weight = init::orthogonal(std::sqrt(2.0));
  Linear a(4, 64, init), b(64, 64, init);
  Init init2(rngs2);
  init2.weight = init::orthogonal(std::sqrt(2.0));
  Linear a2(4, 64, init2);
  EXPECT_TRUE(testing::equal(a.weight.value(), a2.weight.value()));  // the same stream gives the same weights
  EXPECT_EQ(a.weight.dtype(), kF32);
  EXPECT_TRUE(all_close(matmul(a.weight.value().t(), a.weight.value()), eye(4) * 2.0, 1e-5, 1e-5));
  EXPECT_TRUE(all_close(matmul(b.weight.value(), b.weight.value().t()), eye(64) * 2.0, 1e-5, 1e-5));
  EXPECT_EQ(sum(abs(a.bias.value())).item<double>(), 0.0);  // biases keep their own initializer
}

TEST(InitOrthogonal, BadShapesAndGainsAreErrors) {
  Generator g(0);
  EXPECT_KILN_ERROR(init::orthogonal()({4}, Fan{}, g, kF32),
                    "[init.orthogonal] needs a weight of 2 or more dims, got shape [4]");
  EXPECT_KILN_ERROR(init::orthogonal(NAN), "[init.orthogonal] gain must be finite, got nan");
  EXPECT_EQ(init::orthogonal()({0, 3}, Fan{}, g, kF32).numel(), 0);
}

}  // namespace
}  // namespace kiln::nn
