// Tests of scaled_dot_product_attention's small-sequence path (at most 64
// queries and keys, no mask, policy Auto; NOTE [Small attention path] in
// src/ops/attention.cpp): the kernels (both ISA copies) against
// backend::cpu::ref in f32, f64 and bf16 with strided heads; the op against
// the standard path in f64 (out and the three gradients, the heads of one
// qkv projection included); gradchecks in f64, first and second order; bf16
// read and written as bf16. Legend: B batch, H heads, Tq queries, Tk keys,
// Dh, Dv head dims.
#include <cmath>

#include "src/backend/cpu/attention/small_attention.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;
namespace cpu = backend::cpu;

constexpr int64_t kP = cpu::kSmallAttentionMaxKeys;

// [B, H, T, D] heads as views of a token-major [B, T, 3 H D] projection (the
// layout MultiheadAttention hands in): part 0, 1 or 2 of it.
Tensor heads_of(const Tensor& proj, int64_t part, int64_t H) {
  const int64_t B = proj.size(0), T = proj.size(1), D = proj.size(2) / (3 * H);
  return transpose(reshape(narrow(proj, 2, part * H * D, H * D), {B, T, H, D}), 1, 2);
}

struct KernelCase {
  int64_t B, H, Tq, Tk, Dh, Dv;
};

TEST(SmallAttentionKernels, MatchRef) {
  const std::vector<KernelCase> cases = {
      {2, 3, 49, 49, 32, 32},  // the DiT's heads
      {1, 2, 1, 64, 5, 7},  {2, 1, 64, 1, 16, 48}, {1, 1, 17, 33, 3, 70}, {2, 2, 64, 64, 64, 64}, {1, 1, 9, 9, 1, 1},
  };
  for_each_kernel_isa([&](KernelIsa) {
    uint64_t seed = 10;
    for (const KernelCase& c : cases)
      for (DType t : {kF32, kF64, kBF16}) {
        SCOPED_TRACE(fmt::format("B {} H {} Tq {} Tk {} Dh {} Dv {} {}", c.B, c.H, c.Tq, c.Tk, c.Dh, c.Dv, name(t)));
        const cpu::SmallAttentionShape s{.B = c.B, .H = c.H, .Tq = c.Tq, .Tk = c.Tk, .Dh = c.Dh, .Dv = c.Dv,
                                         .scale = 1.0 / std::sqrt(double(c.Dh))};
        const DType at = t == kF64 ? kF64 : kF32;
        Tensor q = randn_seeded({c.B, c.H, c.Tq, c.Dh}, ++seed, t), k = randn_seeded({c.B, c.H, c.Tk, c.Dh}, ++seed, t),
               v = randn_seeded({c.B, c.H, c.Tk, c.Dv}, ++seed, t), g = randn_seeded({c.B, c.H, c.Tq, c.Dv}, ++seed, t);
        if (c.Dh == c.Dv && c.Tq == c.Tk) {  // read in place from one projection's strided heads
          Tensor proj = randn_seeded({c.B, c.Tq, 3 * c.H * c.Dh}, ++seed, t);
          q = heads_of(proj, 0, c.H);
          k = heads_of(proj, 1, c.H);
          v = heads_of(proj, 2, c.H);
          ASSERT_FALSE(q.is_contiguous());
        }
        Tensor o1 = empty({c.B, c.H, c.Tq, c.Dv}, {.dtype = t}), o2 = empty({c.B, c.H, c.Tq, c.Dv}, {.dtype = t});
        Tensor p1 = empty({c.B, c.H, c.Tq, kP}, {.dtype = at}), p2 = empty({c.B, c.H, c.Tq, kP}, {.dtype = at});
        cpu::small_attention_forward(s, q, k, v, o1, p1);
        cpu::ref::small_attention_forward(s, q, k, v, o2, p2);
        // bf16: both round the same f32/f64 value to bf16, so they may differ by one bf16 ulp.
        const double tol = t == kF64 ? 1e-12 : t == kF32 ? 2e-5 : 1e-2;
        EXPECT_TRUE(all_close(to(o1, kF64), to(o2, kF64), tol, tol)) << "out";
        EXPECT_TRUE(all_close(p1, p2, t == kF64 ? 1e-13 : 1e-5, t == kF64 ? 1e-14 : 1e-6)) << "probs";
        // The padding past Tk is exactly 0 and each row sums to 1.
        EXPECT_TRUE(all_close(narrow(p1, 3, c.Tk, kP - c.Tk), zeros({c.B, c.H, c.Tq, kP - c.Tk}, {.dtype = at}), 0, 0));
        EXPECT_TRUE(all_close(sum(p1, {3}), ones({c.B, c.H, c.Tq}, {.dtype = at}), 1e-5, 1e-5));
        Tensor dq1 = empty(q.shape(), {.dtype = t}), dk1 = empty(k.shape(), {.dtype = t}),
               dv1 = empty(v.shape(), {.dtype = t});
        Tensor dq2 = empty(q.shape(), {.dtype = t}), dk2 = empty(k.shape(), {.dtype = t}),
               dv2 = empty(v.shape(), {.dtype = t});
        cpu::small_attention_backward(s, q, k, v, p2, g, dq1, dk1, dv1);
        cpu::ref::small_attention_backward(s, q, k, v, p2, g, dq2, dk2, dv2);
        const double gtol = t == kF64 ? 1e-11 : t == kF32 ? 1e-4 : 2e-2;
        EXPECT_TRUE(all_close(to(dq1, kF64), to(dq2, kF64), gtol, gtol)) << "dq";
        EXPECT_TRUE(all_close(to(dk1, kF64), to(dk2, kF64), gtol, gtol)) << "dk";
        EXPECT_TRUE(all_close(to(dv1, kF64), to(dv2, kF64), gtol, gtol)) << "dv";
      }
  });
}

TEST(SmallAttentionKernels, ResultsDoNotDependOnThreadCount) {
  for_each_kernel_isa([&](KernelIsa) {
    const int before = get_num_threads();
    const cpu::SmallAttentionShape s{.B = 5, .H = 4, .Tq = 49, .Tk = 49, .Dh = 32, .Dv = 32, .scale = 0.3};
    Tensor q = randn_seeded({5, 4, 49, 32}, 1, kF32), k = randn_seeded({5, 4, 49, 32}, 2, kF32),
           v = randn_seeded({5, 4, 49, 32}, 3, kF32), g = randn_seeded({5, 4, 49, 32}, 4, kF32);
    std::vector<Tensor> results[2];
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      Tensor o = empty({5, 4, 49, 32}), p = empty({5, 4, 49, kP});
      Tensor dq = empty(q.shape()), dk = empty(k.shape()), dv = empty(v.shape());
      cpu::small_attention_forward(s, q, k, v, o, p);
      cpu::small_attention_backward(s, q, k, v, p, g, dq, dk, dv);
      results[threads - 1] = {o, p, dq, dk, dv};
    }
    set_num_threads(before);
    for (size_t i = 0; i < results[0].size(); ++i) EXPECT_TRUE(testing::equal(results[0][i], results[1][i])) << i;
  });
}

struct Result {
  Tensor out, dq, dk, dv;
};

Result run(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, AttentionBackend policy) {
  AttentionResult r = scaled_dot_product_attention(q, k, v, {.policy = policy});
  r.out.backward(g);
  return {r.out.detach(), q.grad(), k.grad(), v.grad()};
}

// The op under Auto (the small path up to 64 queries and keys, the flash one
// beyond) against the standard path, in f64; sizes either side of 64.
TEST(SmallAttentionPath, MatchesStandardInF64) {
  struct Case {
    Shape q, k, v;
  };
  const std::vector<Case> cases = {
      {{2, 4, 49, 32}, {2, 4, 49, 32}, {2, 4, 49, 32}}, {{1, 2, 3, 5}, {1, 2, 64, 5}, {1, 2, 64, 2}},
      {{2, 1, 64, 8}, {2, 1, 1, 8}, {2, 1, 1, 8}},      {{1, 1, 65, 4}, {1, 1, 65, 4}, {1, 1, 65, 4}},
      {{1, 1, 7, 4}, {1, 1, 65, 4}, {1, 1, 65, 6}},
  };
  uint64_t seed = 100;
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("q {} k {} v {}", to_string(c.q), to_string(c.k), to_string(c.v)));
    Tensor q = randn_seeded(c.q, ++seed), k = randn_seeded(c.k, ++seed), v = randn_seeded(c.v, ++seed);
    Tensor g = randn_seeded({c.q[0], c.q[1], c.q[2], c.v[3]}, ++seed);
    Result a = run(leaf_of(q), leaf_of(k), leaf_of(v), g, AttentionBackend::Standard);
    Result b = run(leaf_of(q), leaf_of(k), leaf_of(v), g, AttentionBackend::Auto);
    EXPECT_TRUE(all_close(b.out, a.out, 1e-12, 1e-13)) << "out";
    EXPECT_TRUE(all_close(b.dq, a.dq, 1e-11, 1e-12)) << "dq";
    EXPECT_TRUE(all_close(b.dk, a.dk, 1e-11, 1e-12)) << "dk";
    EXPECT_TRUE(all_close(b.dv, a.dv, 1e-11, 1e-12)) << "dv";
  }
}

// Self-attention on the heads of one [B, T, 3 H D] projection: the three
// gradients are written into one buffer shaped like it, so split's vjp needs
// no cat; the projection's gradient equals the standard path's.
TEST(SmallAttentionPath, OneProjectionGradient) {
  const int64_t B = 2, T = 49, H = 4, D = 8;
  for (DType t : {kF64, kF32}) {
    SCOPED_TRACE(name(t));
    Tensor x = randn_seeded({B, T, 3 * H * D}, 7, t), g = randn_seeded({B, H, T, D}, 8, t);
    Tensor grads[2];
    for (AttentionBackend policy : {AttentionBackend::Standard, AttentionBackend::Auto}) {
      Tensor xl = leaf_of(x);
      std::vector<Tensor> qkv = split(xl, H * D, 2);
      auto heads = [&](const Tensor& p) { return transpose(reshape(p, {B, T, H, D}), 1, 2); };
      scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), {.policy = policy}).out.backward(g);
      grads[policy == AttentionBackend::Auto] = xl.grad();
    }
    const double tol = t == kF64 ? 1e-12 : 1e-5;
    EXPECT_TRUE(all_close(grads[1], grads[0], tol, tol));
  }
}

TEST(SmallAttentionPath, Gradcheck) {
  struct Case {
    Shape q, k, v;
    bool nc;  // non-contiguous q and v
  };
  const std::vector<Case> cases = {
      {{1, 2, 3, 4}, {1, 2, 3, 4}, {1, 2, 3, 4}, false},
      {{2, 1, 3, 2}, {2, 1, 5, 2}, {2, 1, 5, 3}, true},
      {{1, 1, 1, 3}, {1, 1, 4, 3}, {1, 1, 4, 1}, false},
  };
  uint64_t seed = 300;
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("q {} k {} v {} nc {}", to_string(c.q), to_string(c.k), to_string(c.v), c.nc));
    Tensor q = leaf(c.q, ++seed, -1, 1), k = leaf(c.k, ++seed, -1, 1), v = leaf(c.v, ++seed, -1, 1);
    if (c.nc) {
      q = noncontiguous(q);
      v = noncontiguous(v);
    }
    EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[1], in[2]).out; },
                     {q, k, v});
  }
}

TEST(SmallAttentionPath, SecondOrder) {
  // create_graph recomputes the standard path's gradient with kiln ops.
  TensorFn outer = [&](const std::vector<Tensor>& in) {
    TensorFn loss = [&](const std::vector<Tensor>& xs) {
      Tensor o = scaled_dot_product_attention(xs[0], xs[1], xs[2]).out;
      return sum(mul(o, o));
    };
    std::vector<Tensor> g = kiln::grad(loss, {in[0], in[1], in[2]});
    return add(add(sum(mul(g[0], g[0])), sum(mul(g[1], g[1]))), sum(mul(g[2], g[2])));
  };
  EXPECT_GRADCHECK(outer, {leaf({2, 1, 3, 2}, 11), leaf({2, 1, 4, 2}, 12), leaf({2, 1, 4, 3}, 13)});
}

// bf16 heads are read and written in bf16 (no f32 copies), computed in f32:
// the result is the f32 computation on the same values, rounded.
TEST(SmallAttentionPath, BFloat16) {
  Tensor q = to(randn_seeded({2, 2, 49, 16}, 1), kBF16), k = to(randn_seeded({2, 2, 49, 16}, 2), kBF16),
         v = to(randn_seeded({2, 2, 49, 16}, 3), kBF16), g = to(randn_seeded({2, 2, 49, 16}, 4), kBF16);
  Result b = run(leaf_of(q), leaf_of(k), leaf_of(v), g, AttentionBackend::Auto);
  Result f = run(leaf_of(to(q, kF64)), leaf_of(to(k, kF64)), leaf_of(to(v, kF64)), to(g, kF64),
                 AttentionBackend::Standard);
  EXPECT_EQ(b.out.dtype(), kBF16);
  EXPECT_EQ(b.dq.dtype(), kBF16);
  EXPECT_TRUE(all_close(to(b.out, kF64), f.out, 1e-2, 1e-2)) << "out";
  EXPECT_TRUE(all_close(to(b.dq, kF64), f.dq, 2e-2, 2e-2)) << "dq";
  EXPECT_TRUE(all_close(to(b.dk, kF64), f.dk, 2e-2, 2e-2)) << "dk";
  EXPECT_TRUE(all_close(to(b.dv, kF64), f.dv, 2e-2, 2e-2)) << "dv";
}

}  // namespace
}  // namespace kiln
