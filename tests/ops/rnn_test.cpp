// lstm_cell_pointwise and gru_cell_pointwise: gradchecks (first order through
// the fused backward kernel, second order through the create_graph
// formulas), fused op against the same cell composed of kiln ops (values and
// gradients), fast kernels against backend::cpu::ref, bf16, error messages.
#include <gtest/gtest.h>

#include "kiln/ops/rnn.h"
#include "src/backend/cpu/nn/rnn.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {
using namespace testing;

// Composed references, written from the equations (PyTorch's docs).
std::pair<Tensor, Tensor> lstm_composed(const Tensor& gates, const Tensor& c) {
  auto p = chunk(gates, 4, 1);
  Tensor c2 = sigmoid(p[1]) * c + sigmoid(p[0]) * tanh(p[2]);
  return {sigmoid(p[3]) * tanh(c2), c2};
}
Tensor gru_composed(const Tensor& gi, const Tensor& gh, const Tensor& h) {
  auto x = chunk(gi, 3, 1), y = chunk(gh, 3, 1);
  Tensor r = sigmoid(x[0] + y[0]), z = sigmoid(x[1] + y[1]);
  Tensor n = tanh(x[2] + r * y[2]);
  return (1.0 - z) * n + z * h;
}

Tensor f32_leaf(const Shape& s, uint64_t seed, double lo = -3, double hi = 3) {
  return leaf(s, seed, lo, hi).detach().to(kF32).requires_grad_(true);
}

TEST(RnnCellGrad, LstmGradcheck) {
  for (auto [B, H] : {std::pair<int64_t, int64_t>{1, 1}, {3, 2}, {4, 5}}) {
    Tensor g = leaf({B, 4 * H}, 10 + uint64_t(H), -2, 2), c = leaf({B, H}, 20 + uint64_t(H));
    EXPECT_GRADCHECK(
        [](const std::vector<Tensor>& in) {
          auto [h, c2] = lstm_cell_pointwise(in[0], in[1]);
          return std::vector<Tensor>{h, c2};
        },
        {g, c});
    // Only h used (c_new's gradient arrives zero-filled), and only c_new.
    EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return lstm_cell_pointwise(in[0], in[1]).first; }, {g, c});
    EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return lstm_cell_pointwise(in[0], in[1]).second; }, {g, c});
  }
  // Non-contiguous inputs (transposed copies viewed back).
  Tensor g = noncontiguous(leaf({3, 8}, 31, -2, 2)).requires_grad_(true), c = noncontiguous(leaf({3, 2}, 32));
  ASSERT_FALSE(g.is_contiguous());
  EXPECT_GRADCHECK(
      [](const std::vector<Tensor>& in) {
        auto [h, c2] = lstm_cell_pointwise(in[0], in[1]);
        return std::vector<Tensor>{h, c2};
      },
      {g, c});
}

TEST(RnnCellGrad, GruGradcheck) {
  for (auto [B, H] : {std::pair<int64_t, int64_t>{1, 1}, {3, 2}, {4, 5}}) {
    Tensor gi = leaf({B, 3 * H}, 40 + uint64_t(H), -2, 2), gh = leaf({B, 3 * H}, 50 + uint64_t(H), -2, 2);
    Tensor h = leaf({B, H}, 60 + uint64_t(H));
    EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return gru_cell_pointwise(in[0], in[1], in[2]); },
                     {gi, gh, h});
  }
  Tensor gi = noncontiguous(leaf({2, 6}, 71, -2, 2)).requires_grad_(true);
  Tensor gh = noncontiguous(leaf({2, 6}, 72, -2, 2)).requires_grad_(true), h = leaf({2, 2}, 73);
  ASSERT_FALSE(gi.is_contiguous());
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return gru_cell_pointwise(in[0], in[1], in[2]); },
                   {gi, gh, h});
}

TEST(RnnCellGrad, SecondOrderThroughCreateGraph) {
  auto r1 = gradcheck_second_order(
      [](const std::vector<Tensor>& in) {
        auto [h, c] = lstm_cell_pointwise(in[0], in[1]);
        return h + 2.0 * c;
      },
      {leaf({2, 8}, 80, -2, 2), leaf({2, 2}, 81)});
  EXPECT_TRUE(r1.ok) << r1.message;
  auto r2 = gradcheck_second_order([](const std::vector<Tensor>& in) { return gru_cell_pointwise(in[0], in[1], in[2]); },
                                   {leaf({2, 6}, 82, -2, 2), leaf({2, 6}, 83, -2, 2), leaf({2, 2}, 84)});
  EXPECT_TRUE(r2.ok) << r2.message;
}

// The fused op and its backward equal the composition of kiln ops (f32).
TEST(RnnCell, FusedMatchesComposed) {
  const int64_t B = 5, H = 37;
  Tensor g = f32_leaf({B, 4 * H}, 90), c = f32_leaf({B, H}, 91);
  Tensor dh = leaf({B, H}, 92).detach().to(kF32), dc = leaf({B, H}, 93).detach().to(kF32);
  auto [h1, c1] = lstm_cell_pointwise(g, c);
  std::vector<Tensor> d_fused = kiln::grad({h1, c1}, {g, c}, {dh, dc});
  auto [h2, c2] = lstm_composed(g, c);
  std::vector<Tensor> d_comp = kiln::grad({h2, c2}, {g, c}, {dh, dc});
  EXPECT_TRUE(all_close(h1, h2, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(c1, c2, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(d_fused[0], d_comp[0], 1e-5, 1e-6));
  EXPECT_TRUE(all_close(d_fused[1], d_comp[1], 1e-5, 1e-6));

  Tensor gi = f32_leaf({B, 3 * H}, 94), gh = f32_leaf({B, 3 * H}, 95), h = f32_leaf({B, H}, 96);
  Tensor o1 = gru_cell_pointwise(gi, gh, h), o2 = gru_composed(gi, gh, h);
  EXPECT_TRUE(all_close(o1, o2, 1e-5, 1e-6));
  auto d1 = kiln::grad({o1}, {gi, gh, h}, {dh}), d2 = kiln::grad({o2}, {gi, gh, h}, {dh});
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(all_close(d1[i], d2[i], 1e-5, 1e-6)) << "grad " << i;
}

// Fast kernels against backend::cpu::ref, f32 and f64, over awkward sizes (H not a
// multiple of the vector width, many rows so the pool splits them).
TEST(RnnCell, KernelsMatchReference) {
  for_each_kernel_isa([&](KernelIsa) {
    for (DType dt : {kF32, kF64})
      for (auto [B, H] : {std::pair<int64_t, int64_t>{1, 1}, {7, 13}, {300, 33}}) {
        auto r = [&](const Shape& s, uint64_t seed) { return leaf(s, seed, -4, 4).detach().to(dt); };
        const double tol = dt == kF32 ? 2e-6 : 1e-13;
        Tensor g = r({B, 4 * H}, 1), c = r({B, H}, 2), dh = r({B, H}, 3), dc = r({B, H}, 4);
        Tensor h1 = Tensor::empty({B, H}, dt), c1 = Tensor::empty({B, H}, dt);
        Tensor h2 = Tensor::empty({B, H}, dt), c2 = Tensor::empty({B, H}, dt);
        backend::cpu::lstm_cell(g, c, h1, c1);
        backend::cpu::ref::lstm_cell(g, c, h2, c2);
        EXPECT_TRUE(all_close(h1, h2, tol, tol));
        EXPECT_TRUE(all_close(c1, c2, tol, tol));
        Tensor gg1 = Tensor::empty({B, 4 * H}, dt), gc1 = Tensor::empty({B, H}, dt);
        Tensor gg2 = Tensor::empty({B, 4 * H}, dt), gc2 = Tensor::empty({B, H}, dt);
        backend::cpu::lstm_cell_backward(g, c, c1, dh, dc, gg1, gc1);
        backend::cpu::ref::lstm_cell_backward(g, c, c1, dh, dc, gg2, gc2);
        EXPECT_TRUE(all_close(gg1, gg2, tol, tol));
        EXPECT_TRUE(all_close(gc1, gc2, tol, tol));
        Tensor gc3 = Tensor::empty({B, H}, dt);  // the c-only path
        backend::cpu::lstm_cell_backward(g, c, c1, dh, dc, Tensor(), gc3);
        EXPECT_TRUE(all_close(gc3, gc2, tol, tol));

        Tensor gi = r({B, 3 * H}, 5), gh = r({B, 3 * H}, 6), h = r({B, H}, 7);
        Tensor o1 = Tensor::empty({B, H}, dt), o2 = Tensor::empty({B, H}, dt);
        backend::cpu::gru_cell(gi, gh, h, o1);
        backend::cpu::ref::gru_cell(gi, gh, h, o2);
        EXPECT_TRUE(all_close(o1, o2, tol, tol));
        Tensor a1 = Tensor::empty({B, 3 * H}, dt), b1 = Tensor::empty({B, 3 * H}, dt), e1 = Tensor::empty({B, H}, dt);
        Tensor a2 = Tensor::empty({B, 3 * H}, dt), b2 = Tensor::empty({B, 3 * H}, dt), e2 = Tensor::empty({B, H}, dt);
        backend::cpu::gru_cell_backward(gi, gh, h, dh, a1, b1, e1);
        backend::cpu::ref::gru_cell_backward(gi, gh, h, dh, a2, b2, e2);
        EXPECT_TRUE(all_close(a1, a2, tol, tol));
        EXPECT_TRUE(all_close(b1, b2, tol, tol));
        EXPECT_TRUE(all_close(e1, e2, tol, tol));
        Tensor e3 = Tensor::empty({B, H}, dt);  // the h-only path
        backend::cpu::gru_cell_backward(gi, gh, h, dh, Tensor(), Tensor(), e3);
        EXPECT_TRUE(all_close(e3, e2, tol, tol));
      }
  });
}

TEST(RnnCell, SameResultForAnyThreadCount) {
  Tensor g = leaf({256, 4 * 64}, 7).detach().to(kF32), c = leaf({256, 64}, 8).detach().to(kF32);
  const int saved = get_num_threads();
  set_num_threads(1);
  auto [h1, c1] = lstm_cell_pointwise(g, c);
  set_num_threads(2);
  auto [h2, c2] = lstm_cell_pointwise(g, c);
  set_num_threads(saved);
  EXPECT_TRUE(equal(h1, h2));
  EXPECT_TRUE(equal(c1, c2));
}

TEST(RnnCell, Bf16FollowsF32) {
  Tensor g = leaf({4, 24}, 11, -2, 2).detach().to(kF32), c = leaf({4, 6}, 12).detach().to(kF32);
  auto [h, c2] = lstm_cell_pointwise(g.to(kBF16), c.to(kBF16));
  auto [hw, cw] = lstm_cell_pointwise(g, c);
  EXPECT_EQ(h.dtype(), kBF16);
  EXPECT_TRUE(all_close(h.to(kF32), hw, 2e-2, 2e-2));
  EXPECT_TRUE(all_close(c2.to(kF32), cw, 2e-2, 2e-2));
  Tensor gi = g.narrow(1, 0, 18).contiguous(), gh = g.narrow(1, 6, 18).contiguous();
  Tensor o = gru_cell_pointwise(gi.to(kBF16), gh.to(kBF16), c.to(kBF16));
  EXPECT_TRUE(all_close(o.to(kF32), gru_cell_pointwise(gi, gh, c), 2e-2, 2e-2));
}

TEST(RnnCell, Errors) {
  Tensor c = zeros({3, 2}), g = zeros({3, 8});
  EXPECT_KILN_ERROR(lstm_cell_pointwise(zeros({3, 6}), c),
                    "[lstm_cell_pointwise] gates [3, 6] must be [B, 4H] = [3, 8] for c [3, 2]");
  EXPECT_KILN_ERROR(lstm_cell_pointwise(g, zeros({3})), "[lstm_cell_pointwise] c must be [B, H], got [3]");
  EXPECT_KILN_ERROR(lstm_cell_pointwise(g.to(kF64), c), "[lstm_cell_pointwise] dtype mismatch: gates is f64 and c is f32");
  EXPECT_KILN_ERROR(lstm_cell_pointwise(zeros({3, 8}, {.dtype = kI64}), zeros({3, 2}, {.dtype = kI64})),
                    "[lstm_cell_pointwise] expects floating tensors");
  EXPECT_KILN_ERROR(lstm_cell_pointwise(Tensor(), c), "[lstm_cell_pointwise] gates is an undefined tensor");
  EXPECT_KILN_ERROR(gru_cell_pointwise(zeros({3, 6}), zeros({2, 6}), c),
                    "[gru_cell_pointwise] gh [2, 6] must be [B, 3H] = [3, 6] for h [3, 2]");
  EXPECT_KILN_ERROR(gru_cell_pointwise(zeros({3, 8}), zeros({3, 6}), c),
                    "[gru_cell_pointwise] gi [3, 8] must be [B, 3H] = [3, 6] for h [3, 2]");
}

}  // namespace
}  // namespace kiln
