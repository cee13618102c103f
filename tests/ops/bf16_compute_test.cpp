// bf16 matrix products and convolutions in both Bf16Compute modes
// (kiln/core/cpu_info.h). In f32 mode a bf16 kernel must give exactly the f32
// kernel's result on the widened operands, rounded once to bf16; in native
// mode (only where the CPU has bf16 instructions) the same within bf16's
// rounding. Both stay on fast code (never oneDNN's reference kernels).
#include "src/backend/cpu/linalg/conv.h"
#include "src/backend/cpu/linalg/matmul.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;

// Runs the body with bf16 computed in `mode`, restoring the previous mode.
class Bf16Mode {
 public:
  explicit Bf16Mode(Bf16Compute mode) : saved_(cpu_info().bf16) { detail::set_bf16_compute(mode); }
  ~Bf16Mode() { detail::set_bf16_compute(saved_); }

 private:
  Bf16Compute saved_;
};

// f32 always; native where the CPU has bf16 instructions that oneDNN may use
// (its ONEDNN_MAX_CPU_ISA cap can forbid them).
std::vector<Bf16Compute> supported_modes() {
  std::vector<Bf16Compute> modes{Bf16Compute::f32};
  try {
    Bf16Mode probe(Bf16Compute::native);
    modes.push_back(Bf16Compute::native);
  } catch (const Error&) {
  }
  return modes;
}

Tensor bf16_randn(const Shape& s, Generator& gen) { return to(randn(s, gen), kBF16); }

TEST(Bf16Compute, F32ModeMatmulIsTheF32ProductRoundedOnce) {
  Bf16Mode mode(Bf16Compute::f32);
  Generator gen(1);
  // A transposed operand, a bias and beta != 0 (out's old values read).
  Tensor a = bf16_randn({3, 67, 129}, gen), bt = bf16_randn({45, 129}, gen), bias = bf16_randn({45}, gen);
  Tensor old = bf16_randn({3, 67, 45}, gen);
  Tensor got = old.clone();
  backend::cpu::matmul(a, bt.t(), got, {.bias = &bias, .alpha = 0.5, .beta = 2.0});
  EXPECT_EQ(got.dtype(), kBF16);
  EXPECT_NE(backend::cpu::last_matmul_impl(), "plain");
  EXPECT_NE(backend::cpu::last_matmul_impl().rfind("ref", 0), 0u) << backend::cpu::last_matmul_impl();
  Tensor want32 = to(old, kF32), bias32 = to(bias, kF32);
  backend::cpu::matmul(to(a, kF32), to(bt, kF32).t(), want32, {.bias = &bias32, .alpha = 0.5, .beta = 2.0});
  EXPECT_TRUE(equal(got, to(want32, kBF16)));
}

TEST(Bf16Compute, MatmulMatchesTheReferenceInEveryMode) {
  Generator gen(2);
  Tensor a = bf16_randn({130, 257}, gen), b = bf16_randn({257, 96}, gen);
  Tensor want = zeros({130, 96}, {.dtype = kBF16});
  backend::cpu::ref::matmul(a, b, want);
  for (Bf16Compute m : supported_modes()) {
    Bf16Mode mode(m);
    Tensor got = matmul(a, b);
    // Each output is one f32 sum rounded to bf16: 2^-8 relative, plus the
    // summation-order difference between kernels (257 terms of size ~1).
    EXPECT_TRUE(all_close(to(got, kF32), to(want, kF32), 1.0 / 128, 257 * 1e-6)) << name(m);
  }
}

TEST(Bf16Compute, F32ModeConvolutionIsTheF32ConvolutionRoundedOnce) {
  Bf16Mode mode(Bf16Compute::f32);
  Generator gen(3);
  backend::cpu::ConvGeom g;
  g.B = 2, g.C = 8, g.O = 16, g.H = g.W = 12, g.OH = g.OW = 12, g.KH = g.KW = 3, g.pt = g.pl = g.pb = g.pr = 1;
  Tensor x = bf16_randn({2, 8, 12, 12}, gen), w = bf16_randn({16, 8, 3, 3}, gen), b = bf16_randn({16}, gen);
  Tensor dy = bf16_randn({2, 16, 12, 12}, gen);
  Tensor x32 = to(x, kF32), w32 = to(w, kF32), b32 = to(b, kF32), dy32 = to(dy, kF32);

  Tensor y = empty({2, 16, 12, 12}, {.dtype = kBF16}), y32 = empty({2, 16, 12, 12});
  backend::cpu::conv_forward(g, x, w, &b, y);
  EXPECT_NE(backend::cpu::last_conv_impl(), "ref");
  backend::cpu::conv_forward(g, x32, w32, &b32, y32);
  EXPECT_TRUE(equal(y, to(y32, kBF16))) << "forward";

  Tensor dx = empty(x.shape(), {.dtype = kBF16}), dx32 = empty(x.shape());
  backend::cpu::conv_backward_data(g, dy, w, nullptr, dx);
  backend::cpu::conv_backward_data(g, dy32, w32, nullptr, dx32);
  EXPECT_TRUE(equal(dx, to(dx32, kBF16))) << "backward data";

  Tensor dw = empty(w.shape(), {.dtype = kBF16}), db = empty({16}, {.dtype = kBF16});
  Tensor dw32 = empty(w.shape()), db32 = empty({16});
  backend::cpu::conv_backward_weights(g, x, dy, dw, &db);
  backend::cpu::conv_backward_weights(g, x32, dy32, dw32, &db32);
  EXPECT_TRUE(equal(dw, to(dw32, kBF16))) << "backward weights";
  EXPECT_TRUE(equal(db, to(db32, kBF16))) << "backward bias";
}

TEST(Bf16Compute, ConvolutionGradientsAgreeAcrossModes) {
  Generator gen(4);
  Tensor x = bf16_randn({2, 4, 10, 10}, gen), w = bf16_randn({8, 4, 3, 3}, gen), dy = bf16_randn({2, 8, 8, 8}, gen);
  Tensor y64 = conv2d(to(x, kF64), to(w, kF64));
  for (Bf16Compute m : supported_modes()) {
    Bf16Mode mode(m);
    Tensor xs = x.detach().requires_grad_(), ws = w.detach().requires_grad_();
    Tensor y = conv2d(xs, ws);
    EXPECT_EQ(y.dtype(), kBF16);
    EXPECT_TRUE(all_close(to(y, kF64), y64, 1.0 / 128, 0.05)) << name(m);
    y.backward(dy);
    Tensor gx64 = conv_transpose2d(to(dy, kF64), to(w, kF64));
    EXPECT_TRUE(all_close(to(xs.grad(), kF64), gx64, 1.0 / 128, 0.05)) << name(m);
  }
}

}  // namespace
}  // namespace kiln
