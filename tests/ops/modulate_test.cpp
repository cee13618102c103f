// Tests of adaln_modulate, layer_norm_modulate and gated_residual
// (kiln/ops/modulate.h): the fused
// kernels against the same math composed of kiln ops in f64 (values and all
// gradients, the [B, D] operands as strided chunks of one [B, 6D] tensor as
// the DiT passes them), gradchecks in f64 (first and second order), bf16, and
// the error messages. Legend: B batch, T tokens, D features.
#include "kiln/ops/modulate.h"

#include "kiln/ops/norm.h"

#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;

Tensor composed_modulate(const Tensor& x, const Tensor& shift, const Tensor& scale) {
  return add(mul(x, add(unsqueeze(scale, 1), 1.0)), unsqueeze(shift, 1));
}
Tensor composed_gated(const Tensor& x, const Tensor& gate, const Tensor& y) {
  return add(x, mul(unsqueeze(gate, 1), y));
}

// DiT's norm then modulate, eps 1e-6.
Tensor ln_modulate(const Tensor& x, const Tensor& shift, const Tensor& scale) {
  return layer_norm_modulate(x, shift, scale, 1e-6);
}
Tensor composed_ln_modulate(const Tensor& x, const Tensor& shift, const Tensor& scale) {
  return composed_modulate(layer_norm(x, {x.size(2)}, Tensor(), Tensor(), 1e-6), shift, scale);
}

using Op3 = Tensor (*)(const Tensor&, const Tensor&, const Tensor&);

// Values and the three gradients of op against ref on leaves; the [B, D]
// operands are chunks 1 and 4 of a [B, 6D] leaf (row stride 6D).
void expect_matches(Op3 op, Op3 ref, bool second_is_rows, DType t, double tol) {
  const int64_t B = 3, T = 7, D = 20;
  Tensor x = randn_seeded({B, T, D}, 1, t), m = randn_seeded({B, 6 * D}, 2, t), y = randn_seeded({B, T, D}, 3, t),
         g = randn_seeded({B, T, D}, 4, t);
  Tensor got[4], want[4];
  for (int which = 0; which < 2; ++which) {
    Tensor xl = leaf_of(x), ml = leaf_of(m), yl = leaf_of(y);
    std::vector<Tensor> c = chunk(ml, 6, 1);
    Tensor out = second_is_rows ? (which ? ref : op)(xl, c[1], yl) : (which ? ref : op)(xl, c[1], c[4]);
    out.backward(g);
    Tensor* r = which ? want : got;
    r[0] = out.detach();
    r[1] = xl.grad();
    r[2] = ml.grad();
    r[3] = second_is_rows ? yl.grad() : Tensor();
  }
  EXPECT_TRUE(all_close(to(got[0], kF64), to(want[0], kF64), tol, tol)) << "out";
  EXPECT_TRUE(all_close(to(got[1], kF64), to(want[1], kF64), tol, tol)) << "dx";
  EXPECT_TRUE(all_close(to(got[2], kF64), to(want[2], kF64), tol, tol)) << "d[B, 6D]";
  if (second_is_rows) EXPECT_TRUE(all_close(to(got[3], kF64), to(want[3], kF64), tol, tol)) << "dy";
}

TEST(AdalnModulate, MatchesComposedOps) {
  expect_matches(adaln_modulate, composed_modulate, false, kF64, 1e-13);
  expect_matches(adaln_modulate, composed_modulate, false, kF32, 1e-5);
  expect_matches(adaln_modulate, composed_modulate, false, kBF16, 5e-2);
}

TEST(GatedResidual, MatchesComposedOps) {
  expect_matches(gated_residual, composed_gated, true, kF64, 1e-13);
  expect_matches(gated_residual, composed_gated, true, kF32, 1e-5);
  expect_matches(gated_residual, composed_gated, true, kBF16, 5e-2);
}

TEST(LayerNormModulate, MatchesComposedOps) {
  expect_matches(ln_modulate, composed_ln_modulate, false, kF64, 1e-12);
  expect_matches(ln_modulate, composed_ln_modulate, false, kF32, 2e-5);
  expect_matches(ln_modulate, composed_ln_modulate, false, kBF16, 5e-2);
}

TEST(LayerNormModulate, GradcheckAndErrors) {
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return layer_norm_modulate(in[0], in[1], in[2], 1e-5); },
                   {leaf({2, 3, 5}, 21), noncontiguous(leaf({2, 5}, 22)), leaf({2, 5}, 23)});
  GradcheckResult r = gradcheck_second_order(
      [](const std::vector<Tensor>& in) { return layer_norm_modulate(in[0], in[1], in[2], 1e-5); },
      {leaf({2, 2, 4}, 24), leaf({2, 4}, 25), leaf({2, 4}, 26)});
  EXPECT_TRUE(r.ok) << r.message;
  Tensor x = randn_seeded({2, 3, 4}, 1), s = randn_seeded({2, 4}, 2);
  EXPECT_KILN_ERROR(layer_norm_modulate(x, s, randn_seeded({2, 3}, 3), 1e-6), "scale [2, 3] must be [B, D] = [2, 4]");
  EXPECT_KILN_ERROR(layer_norm_modulate(x, s, s, -1.0), "eps must be finite and >= 0, got -1");
}

TEST(AdalnModulate, Gradcheck) {
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return adaln_modulate(in[0], in[1], in[2]); },
                   {leaf({2, 3, 4}, 1), noncontiguous(leaf({2, 4}, 2)), leaf({2, 4}, 3)});
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return gated_residual(in[0], in[1], in[2]); },
                   {leaf({2, 3, 4}, 4), leaf({2, 4}, 5), noncontiguous(leaf({2, 3, 4}, 6))});
}

TEST(AdalnModulate, SecondOrder) {
  // create_graph: the vjps are composed ops, so a gradient's gradient is right.
  GradcheckResult a = gradcheck_second_order(
      [](const std::vector<Tensor>& in) { return adaln_modulate(in[0], in[1], in[2]); },
      {leaf({2, 3, 4}, 7), leaf({2, 4}, 8), leaf({2, 4}, 9)});
  EXPECT_TRUE(a.ok) << a.message;
  GradcheckResult b = gradcheck_second_order(
      [](const std::vector<Tensor>& in) { return gated_residual(in[0], in[1], in[2]); },
      {leaf({2, 3, 4}, 10), leaf({2, 4}, 11), leaf({2, 3, 4}, 12)});
  EXPECT_TRUE(b.ok) << b.message;
}

TEST(AdalnModulate, Errors) {
  Tensor x = randn_seeded({2, 3, 4}, 1), s = randn_seeded({2, 4}, 2);
  EXPECT_KILN_ERROR(adaln_modulate(randn_seeded({2, 4}, 1), s, s), "x [2, 4] must be 3-D [B, T, D]");
  EXPECT_KILN_ERROR(adaln_modulate(x, randn_seeded({2, 5}, 2), s), "shift [2, 5] must be [B, D] = [2, 4]");
  EXPECT_KILN_ERROR(adaln_modulate(x, s, randn_seeded({3, 4}, 2)), "scale [3, 4] must be [B, D] = [2, 4]");
  EXPECT_KILN_ERROR(adaln_modulate(x, to(s, kF32), s), "must share one floating dtype");
  EXPECT_KILN_ERROR(adaln_modulate(x, Tensor(), s), "shift");
  EXPECT_KILN_ERROR(gated_residual(x, s, randn_seeded({2, 3, 5}, 3)), "y [2, 3, 5] must have x's shape [2, 3, 4]");
  EXPECT_KILN_ERROR(gated_residual(x, randn_seeded({2, 3}, 3), x), "gate [2, 3] must be [B, D] = [2, 4]");
}

}  // namespace
}  // namespace kiln
