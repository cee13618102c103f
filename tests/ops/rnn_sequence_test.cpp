// lstm_sequence (one LSTM layer over a whole sequence as one op) and its
// training kernels (backend::cpu::lstm_cell_train / lstm_cell_backward_acts against
// backend::cpu::ref, f32 and f64, odd H, B = 1, rows split over threads): f64
// gradchecks w.r.t. every input (B = 1, T = 1, odd H, no bias, one bias,
// non-contiguous inputs), second order through the create_graph path, values
// and gradients against the same layer composed per step from
// lstm_cell_pointwise and kiln ops, bf16 against f32, error messages.
#include <gtest/gtest.h>

#include "kiln/ops/rnn.h"
#include "src/backend/cpu/nn/rnn.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {
using namespace testing;

struct Dims {
  int64_t T, B, I, H;
};

// The per-step reference: T steps of addmm + the fused cell tail.
std::pair<Tensor, Tensor> lstm_steps(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                                     const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) {
  Tensor h = h0, c = c0;
  std::vector<Tensor> hs;
  for (int64_t t = 0; t < x.size(0); ++t) {
    Tensor pre = addmm(mm(x.select(0, t), w_ih.t()), h, w_hh.t());
    if (b_ih.defined()) pre = pre + b_ih;
    if (b_hh.defined()) pre = pre + b_hh;
    std::tie(h, c) = lstm_cell_pointwise(pre, c);
    hs.push_back(h);
  }
  return {stack(hs, 0), c};
}

// Inputs {x, h0, c0, w_ih, w_hh, b_ih, b_hh} as f64 leaves.
std::vector<Tensor> inputs(Dims d, uint64_t seed) {
  return {leaf({d.T, d.B, d.I}, seed, -2, 2), leaf({d.B, d.H}, seed + 1), leaf({d.B, d.H}, seed + 2),
          leaf({4 * d.H, d.I}, seed + 3),     leaf({4 * d.H, d.H}, seed + 4), leaf({4 * d.H}, seed + 5),
          leaf({4 * d.H}, seed + 6)};
}

std::vector<Tensor> both(const std::pair<Tensor, Tensor>& r) { return {r.first, r.second}; }

TEST(LstmSequence, Gradcheck) {
  for (Dims d : {Dims{1, 1, 1, 1}, Dims{1, 3, 2, 3}, Dims{3, 1, 2, 3}, Dims{4, 2, 3, 5}}) {
    std::vector<Tensor> in = inputs(d, 10 * uint64_t(d.T + d.H));
    EXPECT_GRADCHECK(
        [](const std::vector<Tensor>& v) { return both(lstm_sequence(v[0], v[1], v[2], v[3], v[4], v[5], v[6])); },
        in);
    // Only hs used (c_T's gradient arrives zero-filled), and only c_T.
    EXPECT_GRADCHECK(
        [](const std::vector<Tensor>& v) { return lstm_sequence(v[0], v[1], v[2], v[3], v[4], v[5], v[6]).first; },
        in);
    EXPECT_GRADCHECK(
        [](const std::vector<Tensor>& v) { return lstm_sequence(v[0], v[1], v[2], v[3], v[4], v[5], v[6]).second; },
        in);
  }
}

TEST(LstmSequence, GradcheckBiasesAndLayouts) {
  const Dims d{3, 2, 3, 3};
  std::vector<Tensor> in = inputs(d, 70);
  // No bias, then b_ih only.
  EXPECT_GRADCHECK(
      [](const std::vector<Tensor>& v) { return both(lstm_sequence(v[0], v[1], v[2], v[3], v[4])); },
      {in[0], in[1], in[2], in[3], in[4]});
  EXPECT_GRADCHECK(
      [](const std::vector<Tensor>& v) { return both(lstm_sequence(v[0], v[1], v[2], v[3], v[4], v[5])); },
      {in[0], in[1], in[2], in[3], in[4], in[5]});
  // Non-contiguous x, h0, c0 and weights.
  std::vector<Tensor> nc;
  for (size_t i = 0; i < 5; ++i) nc.push_back(noncontiguous(in[i].detach()).requires_grad_(true));
  ASSERT_FALSE(nc[0].is_contiguous());
  ASSERT_FALSE(nc[2].is_contiguous());
  EXPECT_GRADCHECK(
      [](const std::vector<Tensor>& v) { return both(lstm_sequence(v[0], v[1], v[2], v[3], v[4], v[5], v[6])); },
      {nc[0], nc[1], nc[2], nc[3], nc[4], in[5], in[6]});
  // Some inputs without grad (x as data, as in a first layer).
  Tensor x = in[0].detach();
  EXPECT_GRADCHECK(
      [&](const std::vector<Tensor>& v) { return both(lstm_sequence(x, v[0], v[1], v[2], v[3], v[4], v[5])); },
      {in[1], in[2], in[3], in[4], in[5], in[6]});
}

TEST(LstmSequence, SecondOrderThroughCreateGraph) {
  std::vector<Tensor> in = inputs({2, 2, 2, 2}, 90);
  auto r = gradcheck_second_order(
      [](const std::vector<Tensor>& v) {
        auto [hs, c] = lstm_sequence(v[0], v[1], v[2], v[3], v[4], v[5], v[6]);
        return sum(hs) + 2.0 * sum(c);
      },
      in);
  EXPECT_TRUE(r.ok) << r.message;
}

// The fused op and its backward equal T composed steps (f32, larger sizes
// so the GEMMs run on oneDNN with several blocks; H = 37 is odd).
TEST(LstmSequence, MatchesPerStepComposition) {
  for (Dims d : {Dims{6, 5, 7, 37}, Dims{1, 1, 3, 16}, Dims{9, 32, 64, 64}}) {
    std::vector<Tensor> in;
    for (const Tensor& t : inputs(d, 100)) in.push_back(t.detach().to(kF32).requires_grad_(true));
    Tensor dh = leaf({d.T, d.B, d.H}, 200).detach().to(kF32), dc = leaf({d.B, d.H}, 201).detach().to(kF32);
    auto [hs1, c1] = lstm_sequence(in[0], in[1], in[2], in[3], in[4], in[5], in[6]);
    auto [hs2, c2] = lstm_steps(in[0], in[1], in[2], in[3], in[4], in[5], in[6]);
    EXPECT_TRUE(all_close(hs1, hs2, 1e-4, 1e-5));
    EXPECT_TRUE(all_close(c1, c2, 1e-4, 1e-5));
    std::vector<Tensor> g1 = kiln::grad({hs1, c1}, in, {dh, dc});
    std::vector<Tensor> g2 = kiln::grad({hs2, c2}, in, {dh, dc});
    for (size_t i = 0; i < in.size(); ++i) EXPECT_TRUE(all_close(g1[i], g2[i], 1e-4, 1e-4)) << "grad " << i;
  }
}

// The training kernels keep activations for a backward without
// transcendentals; they must give backend::cpu::ref's values (h, c, and the gradients
// of lstm_cell_backward), with the saved activations equal to sigmoid/tanh of
// the pre-activations.
TEST(LstmSequence, TrainKernelsMatchReference) {
  for (DType dt : {kF32, kF64})
    for (auto [B, H] : {std::pair<int64_t, int64_t>{1, 1}, {1, 37}, {7, 13}, {32, 256}, {300, 33}}) {
      auto r = [&](const Shape& s, uint64_t seed) { return leaf(s, seed, -4, 4).detach().to(dt); };
      const double tol = dt == kF32 ? 2e-6 : 1e-13;
      Tensor g = r({B, 4 * H}, 1), c = r({B, H}, 2), dh = r({B, H}, 3), dc = r({B, H}, 4);
      Tensor acts = g.clone(), h1 = Tensor::empty({B, H}, dt), c1 = Tensor::empty({B, H}, dt);
      Tensor tc = Tensor::empty({B, H}, dt);
      backend::cpu::lstm_cell_train(acts, c, h1, c1, tc);
      Tensor h2 = Tensor::empty({B, H}, dt), c2 = Tensor::empty({B, H}, dt);
      backend::cpu::ref::lstm_cell(g, c, h2, c2);
      EXPECT_TRUE(all_close(h1, h2, tol, tol));
      EXPECT_TRUE(all_close(c1, c2, tol, tol));
      EXPECT_TRUE(all_close(tc, tanh(c2), tol, tol));
      auto p = chunk(g, 4, 1);
      EXPECT_TRUE(all_close(acts, cat({sigmoid(p[0]), sigmoid(p[1]), tanh(p[2]), sigmoid(p[3])}, 1), tol, tol));

      Tensor gg1 = Tensor::empty({B, 4 * H}, dt), dc1 = dc.clone();
      backend::cpu::lstm_cell_backward_acts(acts, c, tc, dh, dc1, gg1);
      Tensor gg2 = Tensor::empty({B, 4 * H}, dt), dc2 = Tensor::empty({B, H}, dt);
      backend::cpu::ref::lstm_cell_backward(g, c, c2, dh, dc, gg2, dc2);
      EXPECT_TRUE(all_close(gg1, gg2, 4 * tol, 4 * tol)) << name(dt) << " B " << B << " H " << H;
      EXPECT_TRUE(all_close(dc1, dc2, 4 * tol, 4 * tol));
    }
}

TEST(LstmSequence, SameResultForAnyThreadCount) {
  std::vector<Tensor> in;
  for (const Tensor& t : inputs({3, 64, 8, 64}, 500)) in.push_back(t.detach().to(kF32).requires_grad_(true));
  Tensor dh = leaf({3, 64, 64}, 501).detach().to(kF32);
  const int saved = get_num_threads();
  std::vector<std::vector<Tensor>> res;
  for (int n : {1, 2}) {
    set_num_threads(n);
    auto [hs, c] = lstm_sequence(in[0], in[1], in[2], in[3], in[4], in[5], in[6]);
    std::vector<Tensor> r = kiln::grad({hs}, in, {dh});
    r.push_back(hs.detach());
    r.push_back(c.detach());
    res.push_back(r);
  }
  set_num_threads(saved);
  // GEMMs may block K differently per thread count: equal to rounding.
  for (size_t i = 0; i < res[0].size(); ++i) EXPECT_TRUE(all_close(res[0][i], res[1][i], 1e-5, 1e-6)) << i;
}

TEST(LstmSequence, NoGradLeavesNoGraph) {
  std::vector<Tensor> in = inputs({3, 2, 2, 3}, 300);
  NoGradGuard no_grad;
  auto [hs, c] = lstm_sequence(in[0], in[1], in[2], in[3], in[4], in[5], in[6]);
  EXPECT_FALSE(hs.requires_grad());
  EXPECT_FALSE(c.requires_grad());
}

TEST(LstmSequence, Bf16FollowsF32) {
  std::vector<Tensor> in;
  for (const Tensor& t : inputs({4, 3, 5, 6}, 400)) in.push_back(t.detach().to(kF32));
  auto [hs, c] = lstm_sequence(in[0], in[1], in[2], in[3], in[4], in[5], in[6]);
  std::vector<Tensor> lo;
  for (const Tensor& t : in) lo.push_back(t.to(kBF16));
  auto [hb, cb] = lstm_sequence(lo[0], lo[1], lo[2], lo[3], lo[4], lo[5], lo[6]);
  EXPECT_EQ(hb.dtype(), kBF16);
  EXPECT_TRUE(all_close(hb.to(kF32), hs, 5e-2, 5e-2));
  EXPECT_TRUE(all_close(cb.to(kF32), c, 5e-2, 5e-2));
}

TEST(LstmSequence, Errors) {
  Tensor x = zeros({4, 3, 5}), h = zeros({3, 2}), w_ih = zeros({8, 5}), w_hh = zeros({8, 2}), b = zeros({8});
  EXPECT_KILN_ERROR(lstm_sequence(zeros({3, 5}), h, h, w_ih, w_hh),
                    "[lstm_sequence] x [3, 5] must be [T, B, I] (time major) with T > 0");
  EXPECT_KILN_ERROR(lstm_sequence(zeros({0, 3, 5}), h, h, w_ih, w_hh), "with T > 0");
  EXPECT_KILN_ERROR(lstm_sequence(x, h, h, w_ih, zeros({8, 3})), "[lstm_sequence] w_hh [8, 3] must be [4H, H]");
  EXPECT_KILN_ERROR(lstm_sequence(x, h, h, zeros({8, 4}), w_hh),
                    "[lstm_sequence] w_ih [8, 4] must be [4H, I] = [8, 5] for x [4, 3, 5] and w_hh [8, 2]");
  EXPECT_KILN_ERROR(lstm_sequence(x, zeros({2, 2}), h, w_ih, w_hh),
                    "[lstm_sequence] h0 [2, 2] must be [B, H] = [3, 2]");
  EXPECT_KILN_ERROR(lstm_sequence(x, h, zeros({3, 3}), w_ih, w_hh),
                    "[lstm_sequence] c0 [3, 3] must be [B, H] = [3, 2]");
  EXPECT_KILN_ERROR(lstm_sequence(x, h, h, w_ih, w_hh, zeros({6})), "[lstm_sequence] b_ih [6] must be [4H] = [8]");
  EXPECT_KILN_ERROR(lstm_sequence(x, h, h, w_ih, w_hh, b, zeros({8, 1})), "[lstm_sequence] b_hh [8, 1] must be");
  EXPECT_KILN_ERROR(lstm_sequence(x, h, h, w_ih, w_hh.to(kF64), b),
                    "[lstm_sequence] dtype mismatch: x is f32 and w_hh is f64");
  EXPECT_KILN_ERROR(lstm_sequence(x.to(kI64), h, h, w_ih, w_hh), "[lstm_sequence] expects floating tensors");
  EXPECT_KILN_ERROR(lstm_sequence(x, Tensor(), h, w_ih, w_hh), "[lstm_sequence] h0 is an undefined tensor");
}

}  // namespace
}  // namespace kiln
