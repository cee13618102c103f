// Tests of the first-layer backward-weights path (src/backend/cpu/linalg/conv.cpp, after
// NOTE [Conv layouts]): few input channels (C < 16) and 16+ output channels
// run oneDNN's JIT kernel with the output gradient and the weight gradient
// blocked; checked against backend::cpu::ref on random geometries (strides, dilation,
// asymmetric padding), in f32 and bf16, and on the cnn_b64 shape; geometries
// just outside the rule (C = 16, O = 15, groups) keep matching too.
#include "src/backend/cpu/linalg/conv.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;

// OH, OW, pb, pr from the rest (PyTorch's floor; NOTE [Conv geometry]).
void finish_geom(backend::cpu::ConvGeom& g, int64_t pb, int64_t pr) {
  const int64_t sh = g.H + g.pt + pb - g.dh * (g.KH - 1) - 1, sw = g.W + g.pl + pr - g.dw * (g.KW - 1) - 1;
  g.OH = sh / g.sh + 1, g.OW = sw / g.sw + 1;
  g.pb = pb - sh % g.sh, g.pr = pr - sw % g.sw;
}

void expect_weights_match(const backend::cpu::ConvGeom& g, DType t, Generator& gen, bool want_dnnl) {
  Tensor large = to(randn({g.B, g.C, g.H, g.W}, gen), t), small = to(randn({g.B, g.O, g.OH, g.OW}, gen), t);
  Tensor aw = empty({g.O, g.C / g.groups, g.KH, g.KW}, {.dtype = t}), ab = empty({g.O}, {.dtype = t});
  Tensor rw = empty(aw.shape(), {.dtype = t}), rb = empty({g.O}, {.dtype = t});
  backend::cpu::conv_backward_weights(g, large, small, aw, &ab);
  const std::string impl = backend::cpu::last_conv_impl();
  if (want_dnnl) {
    EXPECT_EQ(impl.find("ref"), std::string::npos) << impl;
  }
  backend::cpu::ref::conv_backward_weights(g, large, small, rw, &rb);
  // bf16: products of bf16 inputs summed in f32 by oneDNN, rounded once;
  // sums run over B * OH * OW terms of unit variance.
  const double scale = std::sqrt(double(g.B * g.OH * g.OW));
  const double tol = t == kBF16 ? 2e-2 * scale : 1e-4 * scale;
  EXPECT_TRUE(all_close(to(aw, kF32), to(rw, kF32), 0, tol)) << "weights, " << impl;
  EXPECT_TRUE(all_close(to(ab, kF32), to(rb, kF32), 0, tol)) << "bias, " << impl;
  // Without a bias gradient: a second primitive, same weights.
  Tensor aw2 = empty(aw.shape(), {.dtype = t});
  backend::cpu::conv_backward_weights(g, large, small, aw2, nullptr);
  EXPECT_TRUE(all_close(to(aw2, kF32), to(rw, kF32), 0, tol)) << "weights without bias, " << backend::cpu::last_conv_impl();
}

TEST(ConvFirstLayer, BackwardWeightsMatchesRef) {
  Generator gen(21);
  auto pick = [&](int64_t lo, int64_t hi) { return lo + randint(0, hi - lo + 1, {}, gen).item<int64_t>(); };
  for (int i = 0; i < 24; ++i) {
    backend::cpu::ConvGeom g;
    g.B = pick(1, 3), g.C = pick(1, 15), g.O = 16 * pick(1, 2) + (i % 3 == 0 ? pick(1, 7) : 0);
    g.KH = pick(1, 5), g.KW = pick(1, 5);
    const bool plain_stride = i % 2 == 0;
    g.sh = plain_stride ? 1 : pick(1, 3), g.sw = plain_stride ? 1 : pick(1, 3);
    g.dh = plain_stride ? 1 : pick(1, 2), g.dw = plain_stride ? 1 : pick(1, 2);
    g.pt = pick(0, g.KH / 2), g.pl = pick(0, g.KW / 2);
    g.H = pick(g.dh * (g.KH - 1) + 1, 20), g.W = pick(g.dw * (g.KW - 1) + 1, 20);
    finish_geom(g, i % 4 == 1 ? pick(0, 2) : g.pt, i % 4 == 1 ? pick(0, 2) : g.pl);
    for (DType t : {kF32, kBF16}) {
      SCOPED_TRACE(fmt::format("case {} {}: B {} C {} O {} H {} W {} K {}x{} s {}x{} d {}x{} pad {} {} {} {}", i,
                               name(t), g.B, g.C, g.O, g.H, g.W, g.KH, g.KW, g.sh, g.sw, g.dh, g.dw, g.pt, g.pl, g.pb,
                               g.pr));
      expect_weights_match(g, t, gen, t == kF32 && plain_stride);
    }
  }
}

TEST(ConvFirstLayer, CnnShapeAndNeighboursOfTheRule) {
  Generator gen(22);
  // cnn_b64's first conv (batch 8): [8, 1, 28, 28] -> 32 channels, 3x3, pad 1.
  backend::cpu::ConvGeom cnn{8, 1, 32, 1, 28, 28, 28, 28, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
  expect_weights_match(cnn, kF32, gen, true);
  backend::cpu::ConvGeom c16 = cnn;  // 16 input channels: blocked everywhere
  c16.C = 16;
  expect_weights_match(c16, kF32, gen, true);
  backend::cpu::ConvGeom o15 = cnn;  // 15 outputs: plain everywhere
  o15.O = 15;
  expect_weights_match(o15, kF32, gen, true);
  backend::cpu::ConvGeom grouped = cnn;  // groups: not a first layer
  grouped.C = 4, grouped.groups = 2;
  expect_weights_match(grouped, kF32, gen, true);
}

// Through the op: conv2d's weight and bias gradients on the first-layer
// shape, the input needing no gradient (as a network's input).
TEST(ConvFirstLayer, Conv2dGradsMatchRef) {
  Generator gen(23);
  Tensor x = randn({4, 3, 12, 12}, gen);
  Tensor w = mul(randn({32, 3, 3, 3}, gen), 0.2).requires_grad_(), b = randn({32}, gen).requires_grad_();
  Tensor y = conv2d(x, w, b, 1, 1);
  Tensor gy = randn(y.shape(), gen);
  y.backward(gy);
  backend::cpu::ConvGeom g{4, 3, 32, 1, 12, 12, 12, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
  Tensor rw = empty(w.shape()), rb = empty({32});
  backend::cpu::ref::conv_backward_weights(g, x, gy, rw, &rb);
  EXPECT_TRUE(all_close(w.grad(), rw, 1e-4, 1e-3));
  EXPECT_TRUE(all_close(b.grad(), rb, 1e-4, 1e-3));
  EXPECT_FALSE(x.grad().defined());
}

}  // namespace
}  // namespace kiln
