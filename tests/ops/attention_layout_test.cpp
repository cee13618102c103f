// The flash path on strided heads: q, k, v that are views of one
// [B, T, 3 * H * Dh] projection (MultiheadAttention's split_heads) are read in
// place, the output and the gradients come back in the token-major layout
// [B, T, H, D] viewed as [B, H, T, D], and every result equals the one from
// contiguous copies (bit for bit: the same arithmetic in the same order).
// Operands with a non-unit last stride are copied first (the fallback).
#include "src/backend/cpu/nn/attention.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;

// q, k, v [B, H, T, Dh] views of a leaf x [B, T, 3 * H * Dh], as split_heads does.
struct Qkv {
  Tensor x, q, k, v;
};

Qkv token_major(int64_t B, int64_t T, int64_t H, int64_t Dh, uint64_t seed, DType t) {
  Generator gen(seed);
  Tensor x = randn({B, T, 3 * H * Dh}, gen, {.dtype = t}).requires_grad_(true);
  std::vector<Tensor> parts = split(x, H * Dh, 2);
  auto heads = [&](const Tensor& p) { return transpose(reshape(p, {B, T, H, Dh}), 1, 2); };
  return {x, heads(parts[0]), heads(parts[1]), heads(parts[2])};
}

Tensor leaf_copy(const Tensor& t) {
  NoGradGuard ng;
  return contiguous(t).detach().requires_grad_(true);
}

TEST(AttentionLayout, TokenMajorHeadsMatchContiguous) {
  struct Case {
    int64_t B, T, H, Dh;
    bool causal;
  };
  uint64_t seed = 1;
  for (const Case c : {Case{2, 64, 4, 32, true}, Case{3, 17, 2, 8, false}, Case{1, 100, 3, 20, true}})
    for (DType t : {kF32, kF64}) {
      SCOPED_TRACE(fmt::format("B {} T {} H {} Dh {} causal {} {}", c.B, c.T, c.H, c.Dh, c.causal, name(t)));
      Qkv a = token_major(c.B, c.T, c.H, c.Dh, ++seed, t);
      ASSERT_FALSE(a.q.is_contiguous());
      Tensor q = leaf_copy(a.q), k = leaf_copy(a.k), v = leaf_copy(a.v);
      Generator gen(++seed);
      Tensor g = randn({c.B, c.H, c.T, c.Dh}, gen, {.dtype = t});
      Tensor out = scaled_dot_product_attention(a.q, a.k, a.v, {.causal = c.causal, .policy = AttentionBackend::Flash}).out;
      Tensor ref = scaled_dot_product_attention(q, k, v, {.causal = c.causal, .policy = AttentionBackend::Flash}).out;
      // The output is token-major: merging the heads is a view.
      EXPECT_TRUE(transpose(out, 1, 2).is_contiguous());
      EXPECT_TRUE(equal(out, ref));
      out.backward(g);
      ref.backward(g);
      // The three gradients are written into one [B, T, 3C] buffer that split's
      // vjp passes on as it is (no cat): x's gradient is contiguous.
      EXPECT_TRUE(a.x.grad().is_contiguous());
      std::vector<Tensor> dx = split(a.x.grad(), c.H * c.Dh, 2);
      EXPECT_TRUE(equal(transpose(reshape(dx[0], {c.B, c.T, c.H, c.Dh}), 1, 2), q.grad())) << "dq";
      EXPECT_TRUE(equal(transpose(reshape(dx[1], {c.B, c.T, c.H, c.Dh}), 1, 2), k.grad())) << "dk";
      EXPECT_TRUE(equal(transpose(reshape(dx[2], {c.B, c.T, c.H, c.Dh}), 1, 2), v.grad())) << "dv";
      // And against the standard path (the composed reference).
      Tensor std_out =
          scaled_dot_product_attention(q, k, v, {.causal = c.causal, .policy = AttentionBackend::Standard}).out;
      const double tol = t == kF32 ? 2e-5 : 1e-12;
      EXPECT_TRUE(all_close(out, std_out, tol, tol));
    }
}

// A last dim with a non-unit stride is copied first; results are unchanged.
TEST(AttentionLayout, NonUnitInnerStrideFallsBack) {
  Generator gen(5);
  Tensor base = randn({2, 3, 8, 6}, gen, {.dtype = kF64});
  Tensor q = transpose(base, 2, 3), k = transpose(randn({2, 3, 8, 6}, gen, {.dtype = kF64}), 2, 3);
  Tensor v = randn({2, 3, 6, 8}, gen, {.dtype = kF64});  // [B, H, Tk = 6, Dv = 8]
  ASSERT_NE(q.strides()[3], 1);
  Tensor out = scaled_dot_product_attention(q, k, v, {.causal = true, .policy = AttentionBackend::Flash}).out;
  Tensor ref = scaled_dot_product_attention(contiguous(q), contiguous(k), v,
                                            {.causal = true, .policy = AttentionBackend::Flash}).out;
  EXPECT_TRUE(equal(out, ref));
  EXPECT_TRUE(out.is_contiguous());  // q is not token-major: a plain layout
}

// f64 gradcheck through token-major views (the layout MultiheadAttention feeds).
TEST(AttentionLayout, GradcheckTokenMajor) {
  const int64_t B = 2, T = 5, H = 2, Dh = 3;
  Generator gen(9);
  Tensor x = randn({B, T, 3 * H * Dh}, gen, {.dtype = kF64}).requires_grad_(true);
  EXPECT_GRADCHECK(
      [&](const std::vector<Tensor>& in) {
        std::vector<Tensor> p = split(in[0], H * Dh, 2);
        auto heads = [&](const Tensor& t) { return transpose(reshape(t, {B, T, H, Dh}), 1, 2); };
        return scaled_dot_product_attention(heads(p[0]), heads(p[1]), heads(p[2]),
                                            {.causal = true, .policy = AttentionBackend::Flash})
            .out;
      },
      {x});
}

}  // namespace
}  // namespace kiln
