// Tests of scaled_dot_product_attention: PyTorch goldens (out, weights, grads)
// on both paths, the flash kernels against backend::cpu::ref, flash against standard
// over masks / causal / Tq != Tk / fully masked rows, gradchecks in f64 (first
// and second order), the flash path's memory, bf16, the mask helpers and the
// error messages. Legend: B batch, H heads, Tq queries, Tk keys, Dh, Dv dims.
#include <cmath>

#include "src/backend/cpu/nn/attention.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;

constexpr double kNegInf = -INFINITY;

struct Result {
  Tensor out, weights, dq, dk, dv;
};

// Forward and backward with upstream gradient g; q, k, v are leaves.
Result run(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const AttentionOptions& o) {
  AttentionResult r = scaled_dot_product_attention(q, k, v, o);
  r.out.backward(g);
  return {r.out.detach(), r.weights.defined() ? r.weights.detach() : Tensor(), q.grad(), k.grad(), v.grad()};
}

Tensor random(const Shape& s, uint64_t seed, DType t = kF64) {
  Generator gen(seed);
  return randn(s, gen, {.dtype = t});
}

// Bool mask, true with probability p.
Tensor random_mask(const Shape& s, uint64_t seed, double p = 0.7) {
  Generator gen(seed);
  return lt(rand(s, gen), p);
}

// A bool tensor from 0/1 literals.
Tensor bools(std::initializer_list<int32_t> v, const Shape& s) { return ne(tensor<int32_t>(v, s), 0); }

const char* policy_name(AttentionBackend p) { return p == AttentionBackend::Flash ? "flash" : "standard"; }

TEST(AttentionGolden, MatchesPyTorch) {
  const auto& j = golden("attention");
  int cases = 0;
  for (const auto& c : j.at("cases")) {
    ++cases;
    for (DType t : {kF32, kF64})
      for (AttentionBackend policy : {AttentionBackend::Standard, AttentionBackend::Flash})
        for (bool nc : {false, true}) {
          SCOPED_TRACE(fmt::format("{} {} {}{}", c.at("name").get<std::string>(), name(t), policy_name(policy),
                                   nc ? " non-contiguous" : ""));
          Tensor q = leaf_of(to(golden_tensor(c.at("q")), t)), k = leaf_of(to(golden_tensor(c.at("k")), t)),
                 v = leaf_of(to(golden_tensor(c.at("v")), t));
          if (nc) {
            q = noncontiguous(q);
            k = noncontiguous(k);
            v = noncontiguous(v);
            ASSERT_FALSE(q.is_contiguous());
          }
          AttentionOptions o{.causal = c.at("causal").get<bool>(),
                             .need_weights = policy == AttentionBackend::Standard,
                             .policy = policy};
          if (c.contains("mask")) o.mask = golden_tensor(c.at("mask"));
          if (!c.at("scale").is_null()) o.scale = c.at("scale").get<double>();
          Result r = run(q, k, v, to(golden_tensor(c.at("g")), t), o);
          const double rtol = t == kF32 ? 1e-5 : 1e-9, atol = t == kF32 ? 2e-6 : 2e-7;  // goldens rounded to 1e-7
          EXPECT_TRUE(all_close(r.out, golden_tensor(c.at("out")), rtol, atol)) << "out";
          if (policy == AttentionBackend::Standard)
            EXPECT_TRUE(all_close(r.weights, golden_tensor(c.at("weights")), rtol, atol)) << "weights";
          else
            EXPECT_FALSE(r.weights.defined());
          EXPECT_TRUE(all_close(r.dq, golden_tensor(c.at("dq")), rtol, atol)) << "dq";
          EXPECT_TRUE(all_close(r.dk, golden_tensor(c.at("dk")), rtol, atol)) << "dk";
          EXPECT_TRUE(all_close(r.dv, golden_tensor(c.at("dv")), rtol, atol)) << "dv";
        }
  }
  EXPECT_EQ(cases, 8);
}

// One kernel-level problem; mask kinds: 0 none, 1 [B,1,1,Tk] padding,
// 2 [B,H,Tq,Tk] random with a fully masked row, 3 [1,1,Tq,Tk] random.
struct KernelCase {
  int64_t B, H, Tq, Tk, Dh, Dv;
  bool causal;
  int mask;
};

backend::cpu::AttentionShape make_shape(const KernelCase& c, uint64_t seed) {
  backend::cpu::AttentionShape s{.B = c.B, .H = c.H, .Tq = c.Tq, .Tk = c.Tk, .Dh = c.Dh, .Dv = c.Dv,
                        .scale = 1.0 / std::sqrt(double(c.Dh)), .causal = c.causal};
  Tensor m;
  if (c.mask == 1) m = random_mask({c.B, 1, 1, c.Tk}, seed, 0.8);
  if (c.mask == 2) {
    m = random_mask({c.B, c.H, c.Tq, c.Tk}, seed, 0.6);
    if (c.Tq > 1) fill_(m.select(0, 0).select(0, 0).select(0, c.Tq / 2), false);
  }
  if (c.mask == 3) m = random_mask({1, 1, c.Tq, c.Tk}, seed, 0.5);
  if (m.defined()) s.mask = expand(m, {c.B, c.H, c.Tq, c.Tk});
  return s;
}

TEST(AttentionKernels, FlashMatchesRef) {
  for_each_kernel_isa([&](KernelIsa) {
    const std::vector<KernelCase> cases = {
        {2, 3, 70, 130, 5, 33, false, 0},  {1, 2, 130, 70, 16, 16, true, 0}, {1, 1, 64, 64, 32, 32, true, 2},
        {2, 2, 1, 200, 8, 8, false, 1},    {1, 2, 97, 97, 64, 48, true, 1},  {2, 1, 33, 65, 17, 3, false, 3},
        {1, 1, 150, 20, 4, 4, true, 0},    {2, 2, 0, 5, 4, 4, false, 0},     {1, 2, 6, 0, 4, 4, false, 0},
        {1, 1, 40, 40, 80, 40, true, 2},
    };
    uint64_t seed = 100;
    for (const KernelCase& c : cases)
      for (DType t : {kF32, kF64}) {
        SCOPED_TRACE(fmt::format("B {} H {} Tq {} Tk {} Dh {} Dv {} causal {} mask {} {}", c.B, c.H, c.Tq, c.Tk, c.Dh,
                                 c.Dv, c.causal, c.mask, name(t)));
        const backend::cpu::AttentionShape s = make_shape(c, ++seed);
        Tensor q = random({c.B, c.H, c.Tq, c.Dh}, ++seed, t), k = random({c.B, c.H, c.Tk, c.Dh}, ++seed, t),
               v = random({c.B, c.H, c.Tk, c.Dv}, ++seed, t), g = random({c.B, c.H, c.Tq, c.Dv}, ++seed, t);
        Tensor o1 = empty({c.B, c.H, c.Tq, c.Dv}, {.dtype = t}), o2 = empty({c.B, c.H, c.Tq, c.Dv}, {.dtype = t});
        Tensor l1 = empty({c.B, c.H, c.Tq}, {.dtype = t}), l2 = empty({c.B, c.H, c.Tq}, {.dtype = t});
        backend::cpu::flash_attention_forward(s, q, k, v, o1, l1);
        backend::cpu::ref::flash_attention_forward(s, q, k, v, o2, l2);
        const double tol = t == kF32 ? 2e-5 : 1e-12;
        EXPECT_TRUE(all_close(o1, o2, tol, tol)) << "out";
        EXPECT_TRUE(all_close(l1, l2, tol, tol)) << "lse";
        Tensor dq1 = empty(q.shape(), {.dtype = t}), dk1 = empty(k.shape(), {.dtype = t}),
               dv1 = empty(v.shape(), {.dtype = t});
        Tensor dq2 = empty(q.shape(), {.dtype = t}), dk2 = empty(k.shape(), {.dtype = t}),
               dv2 = empty(v.shape(), {.dtype = t});
        backend::cpu::flash_attention_backward(s, q, k, v, o2, g, l2, dq1, dk1, dv1);
        backend::cpu::ref::flash_attention_backward(s, q, k, v, o2, g, l2, dq2, dk2, dv2);
        const double gtol = t == kF32 ? 1e-4 : 1e-11;
        EXPECT_TRUE(all_close(dq1, dq2, gtol, gtol)) << "dq";
        EXPECT_TRUE(all_close(dk1, dk2, gtol, gtol)) << "dk";
        EXPECT_TRUE(all_close(dv1, dv2, gtol, gtol)) << "dv";
        // dout is read in place with its strides: a transposed layout and a
        // stride-0 (expanded) one give the same bits as their contiguous copies.
        for (const Tensor& gs : {noncontiguous(g), expand(random({1, 1, 1, c.Dv}, ++seed, t), g.shape())}) {
          Tensor gc = contiguous(gs);
          ASSERT_FALSE(gs.numel() > 1 && gs.is_contiguous());
          backend::cpu::flash_attention_backward(s, q, k, v, o2, gs, l2, dq1, dk1, dv1);
          backend::cpu::flash_attention_backward(s, q, k, v, o2, gc, l2, dq2, dk2, dv2);
          EXPECT_TRUE(testing::equal(dq1, dq2)) << "dq, strided dout";
          EXPECT_TRUE(testing::equal(dk1, dk2)) << "dk, strided dout";
          EXPECT_TRUE(testing::equal(dv1, dv2)) << "dv, strided dout";
        }
      }
  });
}

TEST(AttentionKernels, ResultsDoNotDependOnThreadCount) {
  for_each_kernel_isa([&](KernelIsa) {
    const int before = get_num_threads();
    const KernelCase c{3, 2, 100, 90, 32, 32, true, 1};
    const backend::cpu::AttentionShape s = make_shape(c, 7);
    Tensor q = random({c.B, c.H, c.Tq, c.Dh}, 1, kF32), k = random({c.B, c.H, c.Tk, c.Dh}, 2, kF32),
           v = random({c.B, c.H, c.Tk, c.Dv}, 3, kF32), g = random({c.B, c.H, c.Tq, c.Dv}, 4, kF32);
    std::vector<Tensor> results[2];
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      Tensor o = empty({c.B, c.H, c.Tq, c.Dv}), l = empty({c.B, c.H, c.Tq});
      Tensor dq = empty(q.shape()), dk = empty(k.shape()), dv = empty(v.shape());
      backend::cpu::flash_attention_forward(s, q, k, v, o, l);
      backend::cpu::flash_attention_backward(s, q, k, v, o, g, l, dq, dk, dv);
      results[threads - 1] = {o, l, dq, dk, dv};
    }
    set_num_threads(before);
    for (size_t i = 0; i < results[0].size(); ++i) EXPECT_TRUE(testing::equal(results[0][i], results[1][i])) << i;
  });
}

// Flash against standard at the op level, f64: out and all three grads.
TEST(AttentionPaths, FlashMatchesStandard) {
  struct Case {
    Shape q, k, v;
    bool causal;
    Shape mask;  // empty: none
  };
  const std::vector<Case> cases = {
      {{2, 3, 7, 8}, {2, 3, 7, 8}, {2, 3, 7, 8}, false, {}},
      {{2, 2, 5, 4}, {2, 2, 9, 4}, {2, 2, 9, 6}, false, {2, 1, 1, 9}},
      {{1, 2, 9, 4}, {1, 2, 5, 4}, {1, 2, 5, 3}, true, {}},        // Tq > Tk: rows 0..3 see no key
      {{2, 2, 6, 5}, {2, 2, 6, 5}, {2, 2, 6, 5}, true, {1, 1, 6, 6}},
      {{2, 2, 6, 3}, {2, 2, 10, 3}, {2, 2, 10, 3}, false, {2, 2, 6, 10}},
      {{1, 1, 70, 16}, {1, 1, 75, 16}, {1, 1, 75, 16}, true, {75}},  // crosses the 64-key blocks
  };
  uint64_t seed = 200;
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("q {} k {} v {} causal {} mask {}", to_string(c.q), to_string(c.k), to_string(c.v),
                             c.causal, to_string(c.mask)));
    Tensor q = random(c.q, ++seed), k = random(c.k, ++seed), v = random(c.v, ++seed);
    Tensor g = random({c.q[0], c.q[1], c.q[2], c.v[3]}, ++seed);
    AttentionOptions o{.causal = c.causal};
    if (!c.mask.empty()) {
      o.mask = random_mask(c.mask, ++seed, 0.6);
      if (c.mask.size() == 4 && c.mask[2] > 2) {  // one row with no allowed key
        NoGradGuard ng;
        fill_(o.mask.select(0, 0).select(0, 0).select(0, 2), false);
      }
    }
    o.policy = AttentionBackend::Standard;
    Result a = run(leaf_of(q), leaf_of(k), leaf_of(v), g, o);
    o.policy = AttentionBackend::Flash;
    Result b = run(leaf_of(q), leaf_of(k), leaf_of(v), g, o);
    EXPECT_TRUE(all_close(b.out, a.out, 1e-10, 1e-12)) << "out";
    EXPECT_TRUE(all_close(b.dq, a.dq, 1e-10, 1e-12)) << "dq";
    EXPECT_TRUE(all_close(b.dk, a.dk, 1e-10, 1e-12)) << "dk";
    EXPECT_TRUE(all_close(b.dv, a.dv, 1e-10, 1e-12)) << "dv";
    // f32 agrees to f32 precision.
    Result a32 = run(leaf_of(to(q, kF32)), leaf_of(to(k, kF32)), leaf_of(to(v, kF32)), to(g, kF32),
                  {.mask = o.mask, .causal = c.causal, .policy = AttentionBackend::Standard});
    Result b32 = run(leaf_of(to(q, kF32)), leaf_of(to(k, kF32)), leaf_of(to(v, kF32)), to(g, kF32),
                  {.mask = o.mask, .causal = c.causal, .policy = AttentionBackend::Flash});
    EXPECT_TRUE(all_close(b32.out, a32.out, 1e-4, 1e-5)) << "out f32";
    EXPECT_TRUE(all_close(b32.dq, a32.dq, 1e-4, 1e-5)) << "dq f32";
    EXPECT_TRUE(all_close(b32.dk, a32.dk, 1e-4, 1e-5)) << "dk f32";
    EXPECT_TRUE(all_close(b32.dv, a32.dv, 1e-4, 1e-5)) << "dv f32";
  }
}

TEST(AttentionPaths, FullyMaskedRowsAreZeroWithZeroGradients) {
  // Batch 1 has no valid key; Tq > Tk with causal also leaves rows 0..1 empty.
  Tensor valid = tensor<bool>({true, true, false, true, false, false, false, false}, {2, 4});
  for (AttentionBackend policy : {AttentionBackend::Standard, AttentionBackend::Flash})
    for (bool causal : {false, true}) {
      SCOPED_TRACE(fmt::format("{} causal {}", policy_name(policy), causal));
      Tensor q = leaf_of(random({2, 2, 6, 3}, 1)), k = leaf_of(random({2, 2, 4, 3}, 2)),
             v = leaf_of(random({2, 2, 4, 5}, 3));
      AttentionOptions o{.mask = padding_mask(valid), .causal = causal,
                         .need_weights = policy == AttentionBackend::Standard, .policy = policy};
      Result r = run(q, k, v, random({2, 2, 6, 5}, 4), o);
      EXPECT_TRUE(all_close(r.out.select(0, 1), zeros({2, 6, 5}, {.dtype = kF64}), 0, 0)) << "batch 1 out";
      EXPECT_TRUE(all_close(r.dq.select(0, 1), zeros({2, 6, 3}, {.dtype = kF64}), 0, 0)) << "batch 1 dq";
      EXPECT_TRUE(all_close(r.dk.select(0, 1), zeros({2, 4, 3}, {.dtype = kF64}), 0, 0)) << "batch 1 dk";
      EXPECT_TRUE(all_close(r.dv.select(0, 1), zeros({2, 4, 5}, {.dtype = kF64}), 0, 0)) << "batch 1 dv";
      if (causal) {  // query i sees keys j <= i - 2: rows 0 and 1 are empty in batch 0 too
        EXPECT_TRUE(all_close(r.out.select(0, 0).narrow(1, 0, 2), zeros({2, 2, 5}, {.dtype = kF64}), 0, 0));
        EXPECT_TRUE(all_close(r.dq.select(0, 0).narrow(1, 0, 2), zeros({2, 2, 3}, {.dtype = kF64}), 0, 0));
      }
      EXPECT_TRUE(all(isfinite(r.dq)).item<bool>());
      EXPECT_TRUE(all(isfinite(r.dk)).item<bool>());
      EXPECT_TRUE(all(isfinite(r.dv)).item<bool>());
      // Batch 0 rows with a key are real softmax rows (sum to 1).
      if (r.weights.defined()) {
        EXPECT_TRUE(all_close(r.weights.select(0, 1), zeros({2, 6, 4}, {.dtype = kF64}), 0, 0));
        Tensor rows = sum(r.weights.select(0, 0).narrow(1, causal ? 2 : 0, causal ? 4 : 6), {-1});
        EXPECT_TRUE(all_close(rows, ones(rows.shape(), {.dtype = kF64}), 1e-12, 1e-12));
      }
    }
}

TEST(AttentionPaths, PolicyAndWeights) {
  Tensor q = random({1, 2, 3, 4}, 1), k = random({1, 2, 5, 4}, 2), v = random({1, 2, 5, 4}, 3);
  AttentionResult a = scaled_dot_product_attention(q, k, v);
  EXPECT_FALSE(a.weights.defined());  // Auto without weights: flash (the small-sequence kernel at these sizes)
  AttentionResult b = scaled_dot_product_attention(q, k, v, {.need_weights = true});
  ASSERT_TRUE(b.weights.defined());  // Auto with weights: standard
  EXPECT_EQ(b.weights.shape(), (Shape{1, 2, 3, 5}));
  EXPECT_TRUE(all_close(a.out, b.out, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(b.out, matmul(b.weights, v), 1e-12, 1e-12));
  AttentionResult c = scaled_dot_product_attention(q, k, v, {.policy = AttentionBackend::Standard});
  EXPECT_FALSE(c.weights.defined());
  // The default scale is 1/sqrt(Dh).
  AttentionResult d = scaled_dot_product_attention(q, k, v, {.scale = 0.5});
  EXPECT_TRUE(all_close(d.out, a.out, 1e-12, 1e-12));
  AttentionResult e = scaled_dot_product_attention(q, k, v, {.scale = 2.0});
  EXPECT_FALSE(all_close(e.out, a.out, 1e-3, 1e-3));
}

TEST(AttentionPaths, BFloat16ComputesInF32) {
  Tensor q = random({2, 2, 9, 8}, 1, kF32), k = random({2, 2, 9, 8}, 2, kF32), v = random({2, 2, 9, 8}, 3, kF32);
  for (AttentionBackend policy : {AttentionBackend::Standard, AttentionBackend::Flash}) {
    SCOPED_TRACE(policy_name(policy));
    Tensor qb = leaf_of(to(q, kBF16)), kb = leaf_of(to(k, kBF16)), vb = leaf_of(to(v, kBF16));
    AttentionResult r = scaled_dot_product_attention(qb, kb, vb, {.causal = true, .policy = policy});
    EXPECT_EQ(r.out.dtype(), kBF16);
    Tensor want = scaled_dot_product_attention(to(qb.detach(), kF32), to(kb.detach(), kF32), to(vb.detach(), kF32),
                                               {.causal = true})
                      .out;
    EXPECT_TRUE(all_close(to(r.out, kF32), want, 1e-2, 1e-2));
    sum(r.out).backward();
    ASSERT_TRUE(qb.grad().defined());
    EXPECT_EQ(qb.grad().dtype(), kBF16);
    EXPECT_TRUE(all(isfinite(qb.grad())).item<bool>());
  }
}

TEST(AttentionPaths, MaskRanksAndEmptySizes) {
  Tensor q = random({2, 2, 3, 4}, 1), k = random({2, 2, 5, 4}, 2), v = random({2, 2, 5, 3}, 3);
  Tensor m2 = random_mask({3, 5}, 4);  // [Tq, Tk]: broadcast over B and H
  Tensor want = scaled_dot_product_attention(q, k, v, {.mask = m2.reshape({1, 1, 3, 5}), .need_weights = true}).out;
  for (AttentionBackend p : {AttentionBackend::Standard, AttentionBackend::Flash}) {
    SCOPED_TRACE(policy_name(p));
    EXPECT_TRUE(all_close(scaled_dot_product_attention(q, k, v, {.mask = m2, .policy = p}).out, want, 1e-12, 1e-12));
    // A 0-dim true mask allows everything; a 0-dim false one nothing.
    EXPECT_TRUE(all_close(scaled_dot_product_attention(q, k, v, {.mask = bools({1}, {}), .policy = p}).out,
                          scaled_dot_product_attention(q, k, v, {.policy = p}).out, 1e-12, 1e-12));
    EXPECT_TRUE(all_close(scaled_dot_product_attention(q, k, v, {.mask = bools({0}, {}), .policy = p}).out,
                          zeros({2, 2, 3, 3}, {.dtype = kF64}), 0, 0));
    // No keys: every row is fully masked. No queries: an empty output.
    Tensor k0 = leaf_of(random({2, 2, 0, 4}, 5)), v0 = leaf_of(random({2, 2, 0, 3}, 6)), ql = leaf_of(q);
    Result r = run(ql, k0, v0, ones({2, 2, 3, 3}, {.dtype = kF64}), {.policy = p});
    EXPECT_TRUE(all_close(r.out, zeros({2, 2, 3, 3}, {.dtype = kF64}), 0, 0));
    EXPECT_TRUE(all_close(r.dq, zeros(q.shape(), {.dtype = kF64}), 0, 0));
    Tensor q0 = leaf_of(random({2, 2, 0, 4}, 7));
    Result e = run(q0, leaf_of(k), leaf_of(v), zeros({2, 2, 0, 3}, {.dtype = kF64}), {.causal = true, .policy = p});
    EXPECT_EQ(e.out.shape(), (Shape{2, 2, 0, 3}));
    EXPECT_TRUE(all_close(e.dk, zeros(k.shape(), {.dtype = kF64}), 0, 0));
  }
}

// ---- gradchecks (f64) ----

void gradcheck_attention(AttentionBackend policy) {
  struct Case {
    Shape q, k, v;
    bool causal;
    Shape mask;
    bool nc;  // non-contiguous q and v
  };
  const std::vector<Case> cases = {
      {{1, 2, 3, 4}, {1, 2, 3, 4}, {1, 2, 3, 4}, false, {}, false},
      {{2, 1, 3, 2}, {2, 1, 5, 2}, {2, 1, 5, 3}, true, {}, true},
      {{1, 1, 4, 3}, {1, 1, 3, 3}, {1, 1, 3, 2}, true, {}, false},  // rows 0 sees no key
      {{2, 2, 3, 2}, {2, 2, 4, 2}, {2, 2, 4, 2}, false, {2, 2, 3, 4}, true},
  };
  uint64_t seed = 300;
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} q {} k {} causal {} mask {} nc {}", policy_name(policy), to_string(c.q),
                             to_string(c.k), c.causal, to_string(c.mask), c.nc));
    Tensor q = leaf(c.q, ++seed, -1, 1), k = leaf(c.k, ++seed, -1, 1), v = leaf(c.v, ++seed, -1, 1);
    if (c.nc) {
      q = noncontiguous(q);
      v = noncontiguous(v);
    }
    Tensor mask;
    if (!c.mask.empty()) {
      mask = random_mask(c.mask, ++seed, 0.6);
      fill_(mask.select(0, 0).select(0, 0).select(0, 1), false);  // a fully masked row
    }
    EXPECT_GRADCHECK(
        [&](const std::vector<Tensor>& in) {
          return scaled_dot_product_attention(in[0], in[1], in[2], {.mask = mask, .causal = c.causal, .policy = policy})
              .out;
        },
        {q, k, v});
  }
}

TEST(AttentionGrad, StandardFirstOrder) { gradcheck_attention(AttentionBackend::Standard); }
TEST(AttentionGrad, FlashFirstOrder) { gradcheck_attention(AttentionBackend::Flash); }

TEST(AttentionGrad, WeightsFirstOrder) {
  EXPECT_GRADCHECK(
      [](const std::vector<Tensor>& in) {
        return scaled_dot_product_attention(in[0], in[1], in[2], {.causal = true, .need_weights = true}).weights;
      },
      {leaf({1, 2, 3, 2}, 1), leaf({1, 2, 3, 2}, 2), leaf({1, 2, 3, 2}, 3)});
}

TEST(AttentionGrad, SecondOrderBothPaths) {
  // Through the flash path, create_graph recomputes the standard gradient with
  // kiln ops, so double backward works and agrees with finite differences.
  for (AttentionBackend policy : {AttentionBackend::Standard, AttentionBackend::Flash}) {
    SCOPED_TRACE(policy_name(policy));
    Tensor mask = tensor<bool>({true, false, true, true, false, false, false, false}, {2, 1, 1, 4});
    TensorFn outer = [&](const std::vector<Tensor>& in) {
      TensorFn loss = [&](const std::vector<Tensor>& xs) {
        Tensor o = scaled_dot_product_attention(xs[0], xs[1], xs[2], {.mask = mask, .causal = true, .policy = policy})
                       .out;
        return sum(mul(o, o));
      };
      std::vector<Tensor> g = kiln::grad(loss, {in[0], in[1], in[2]});
      return add(add(sum(mul(g[0], g[0])), sum(mul(g[1], g[1]))), sum(mul(g[2], g[2])));
    };
    EXPECT_GRADCHECK(outer, {leaf({2, 1, 3, 2}, 11), leaf({2, 1, 4, 2}, 12), leaf({2, 1, 4, 3}, 13)});
  }
}

// ---- memory ----

TEST(AttentionMemory, FlashPeakIsFarBelowScores) {
  const int64_t B = 2, H = 4, T = 1024, D = 32;
  const int64_t scores_bytes = B * H * T * T * 4;  // one f32 [B, H, T, T]
  Tensor q = leaf_of(random({B, H, T, D}, 1, kF32)), k = leaf_of(random({B, H, T, D}, 2, kF32)),
         v = leaf_of(random({B, H, T, D}, 3, kF32));
  auto peak_extra = [&](AttentionBackend policy, bool backward) {
    q.set_grad(Tensor());
    k.set_grad(Tensor());
    v.set_grad(Tensor());
    const int64_t base = memory_stats().current_bytes;
    reset_peak_memory_stats();
    {
      Tensor out = scaled_dot_product_attention(q, k, v, {.causal = true, .policy = policy}).out;
      if (backward) sum(out).backward();
    }
    return memory_stats().peak_bytes - base;
  };
  // The backward's scratch is O(T * D) per worker: fix the worker count so the
  // bound below holds on any machine.
  const int threads = get_num_threads();
  set_num_threads(2);
  const int64_t flash_fwd = peak_extra(AttentionBackend::Flash, false);
  const int64_t flash_all = peak_extra(AttentionBackend::Flash, true);
  const int64_t standard_fwd = peak_extra(AttentionBackend::Standard, false);
  set_num_threads(threads);
  EXPECT_LT(flash_fwd, scores_bytes / 16) << "flash forward";
  EXPECT_LT(flash_all, scores_bytes / 4) << "flash forward + backward";
  EXPECT_GT(standard_fwd, scores_bytes) << "the standard path materialises the scores";
  // What flash keeps: out + lse (forward); plus grads, dout and O(T * D) scratch per worker (backward).
  EXPECT_LT(flash_fwd, 2 * B * H * T * (D + 1) * 4 + (int64_t(1) << 20));
}

// ---- masks and errors ----

TEST(AttentionMasks, Helpers) {
  EXPECT_TRUE(testing::equal(causal_mask(3), bools({1, 0, 0, 1, 1, 0, 1, 1, 1}, {1, 1, 3, 3})));
  EXPECT_TRUE(testing::equal(causal_mask(2, 4), bools({1, 1, 1, 0, 1, 1, 1, 1}, {1, 1, 2, 4})));
  EXPECT_TRUE(testing::equal(causal_mask(3, 2), bools({0, 0, 1, 0, 1, 1}, {1, 1, 3, 2})));
  Tensor valid = tensor<bool>({true, true, false, true, false, false}, {2, 3});
  Tensor pm = padding_mask(valid);
  EXPECT_EQ(pm.shape(), (Shape{2, 1, 1, 3}));
  EXPECT_TRUE(testing::equal(pm.reshape({2, 3}), valid));
  // causal = true and an explicit causal_mask give the same result.
  Tensor q = random({1, 1, 4, 3}, 1), k = random({1, 1, 6, 3}, 2), v = random({1, 1, 6, 3}, 3);
  for (AttentionBackend p : {AttentionBackend::Standard, AttentionBackend::Flash})
    EXPECT_TRUE(all_close(scaled_dot_product_attention(q, k, v, {.causal = true, .policy = p}).out,
                          scaled_dot_product_attention(q, k, v, {.mask = causal_mask(4, 6), .policy = p}).out,
                          1e-12, 1e-12));
  EXPECT_KILN_ERROR(causal_mask(-1), "[causal_mask] size must be >= 0, got -1");
  EXPECT_KILN_ERROR(padding_mask(ones({2, 3})), "[padding_mask] valid must be a bool [B, T] tensor");
  EXPECT_KILN_ERROR(padding_mask(tensor<bool>({true, false})), "got [2] bool");
}

TEST(AttentionErrors, Messages) {
  Tensor q = random({2, 3, 4, 5}, 1), k = random({2, 3, 6, 5}, 2), v = random({2, 3, 6, 7}, 3);
  auto sdpa = [](const Tensor& a, const Tensor& b, const Tensor& c, const AttentionOptions& o = {}) {
    return scaled_dot_product_attention(a, b, c, o);
  };
  EXPECT_KILN_ERROR(sdpa(random({3, 4, 5}, 1), k, v),
                    "[scaled_dot_product_attention] q, k and v must be 4-D [B, H, T, D], got q [3, 4, 5]");
  EXPECT_KILN_ERROR(sdpa(q, Tensor(), v), "[scaled_dot_product_attention] k is an undefined tensor");
  EXPECT_KILN_ERROR(sdpa(q, random({2, 3, 6, 4}, 2), v), "q [2, 3, 4, 5] and k [2, 3, 6, 4] differ in head dim (Dh 5 vs 4)");
  EXPECT_KILN_ERROR(sdpa(q, k, random({2, 3, 5, 7}, 3)), "k [2, 3, 6, 5] and v [2, 3, 5, 7] differ in key count (Tk 6 vs 5)");
  EXPECT_KILN_ERROR(sdpa(q, random({1, 3, 6, 5}, 2), v), "batch and head dims [B, H] must match");
  EXPECT_KILN_ERROR(sdpa(q, k, random({2, 2, 6, 7}, 2)), "batch and head dims [B, H] must match");
  EXPECT_KILN_ERROR(sdpa(q, to(k, kF32), v), "must share one floating dtype (f32, f64 or bf16), got q [2, 3, 4, 5] f64, k [2, 3, 6, 5] f32");
  EXPECT_KILN_ERROR(sdpa(ones({2, 3, 4, 5}, {.dtype = kI64}), ones({2, 3, 6, 5}, {.dtype = kI64}),
                         ones({2, 3, 6, 7}, {.dtype = kI64})),
                    "must share one floating dtype");
  EXPECT_KILN_ERROR(sdpa(q, k, v, {.mask = ones({2, 1, 1, 6})}), "mask must be bool (true = allowed), got [2, 1, 1, 6] f32");
  EXPECT_KILN_ERROR(sdpa(q, k, v, {.mask = random_mask({2, 1, 4, 5}, 1)}),
                    "mask [2, 1, 4, 5] does not broadcast to [B, H, Tq, Tk] = [2, 3, 4, 6]");
  EXPECT_KILN_ERROR(sdpa(q, k, v, {.mask = random_mask({1, 2, 3, 4, 6}, 1)}), "mask [1, 2, 3, 4, 6] does not broadcast");
  EXPECT_KILN_ERROR(sdpa(q, k, v, {.need_weights = true, .policy = AttentionBackend::Flash}),
                    "the flash path does not materialise the weights");
  EXPECT_KILN_ERROR(sdpa(random({1, 1, 2, 0}, 1), random({1, 1, 2, 0}, 1), v.narrow(0, 0, 1).narrow(1, 0, 1).narrow(2, 0, 2)),
                    "has head dim 0");
  EXPECT_KILN_ERROR(sdpa(q, k, v, {.scale = INFINITY}), "scale must be finite, got inf");
}

}  // namespace
}  // namespace kiln

// ---- additive mask (spec 002's explicit additive-mask variant) ----

namespace kiln {
namespace {

using namespace testing;

TEST(AttentionAdditiveMask, MatchesComposedSoftmax) {
  // softmax(q k^T * scale + additive) v written out with kiln ops, finite additive values.
  Tensor q = random({2, 2, 3, 4}, 1), k = random({2, 2, 5, 4}, 2), v = random({2, 2, 5, 3}, 3);
  for (const Shape& s : {Shape{3, 5}, Shape{2, 1, 3, 5}, Shape{2, 2, 3, 5}, Shape{1, 1, 1, 5}}) {
    SCOPED_TRACE(to_string(s));
    Tensor a = random(s, 4);
    Tensor w = softmax(add(mul(matmul(q, transpose(k, -2, -1)), 0.5), a), -1);
    AttentionResult r = scaled_dot_product_attention(q, k, v, {.additive_mask = a, .need_weights = true});
    EXPECT_TRUE(all_close(r.weights, w, 1e-12, 1e-12));
    EXPECT_TRUE(all_close(r.out, matmul(w, v), 1e-12, 1e-12));
    // Auto without weights still takes the standard path (flash has no additive mask).
    EXPECT_TRUE(all_close(scaled_dot_product_attention(q, k, v, {.additive_mask = a}).out, r.out, 1e-12, 1e-12));
  }
}

TEST(AttentionAdditiveMask, MinusInfinityEqualsBoolMaskIncludingFullyMaskedRows) {
  Tensor valid = tensor<bool>({true, true, false, true, false, false, false, false}, {2, 4});
  Tensor bool_mask = padding_mask(valid);                                  // [2, 1, 1, 4], batch 1 empty
  Tensor additive = masked_fill(zeros({2, 1, 1, 4}, {.dtype = kF64}), logical_not(bool_mask), kNegInf);
  for (bool causal : {false, true}) {
    SCOPED_TRACE(fmt::format("causal {}", causal));
    Tensor g = random({2, 2, 6, 5}, 4);
    Tensor q1 = leaf_of(random({2, 2, 6, 3}, 1)), k1 = leaf_of(random({2, 2, 4, 3}, 2)),
           v1 = leaf_of(random({2, 2, 4, 5}, 3));
    Result a = run(q1, k1, v1, g, {.mask = bool_mask, .causal = causal, .need_weights = true,
                                   .policy = AttentionBackend::Standard});
    Tensor q2 = leaf_of(q1), k2 = leaf_of(k1), v2 = leaf_of(v1);
    Result b = run(q2, k2, v2, g, {.additive_mask = additive, .causal = causal, .need_weights = true});
    EXPECT_TRUE(all_close(b.out, a.out, 1e-12, 1e-12)) << "out";
    EXPECT_TRUE(all_close(b.weights, a.weights, 1e-12, 1e-12)) << "weights";
    EXPECT_TRUE(all_close(b.dq, a.dq, 1e-12, 1e-12)) << "dq";
    EXPECT_TRUE(all_close(b.dk, a.dk, 1e-12, 1e-12)) << "dk";
    EXPECT_TRUE(all_close(b.dv, a.dv, 1e-12, 1e-12)) << "dv";
    EXPECT_TRUE(all_close(b.out.select(0, 1), zeros({2, 6, 5}, {.dtype = kF64}), 0, 0)) << "fully masked batch";
    EXPECT_TRUE(all(isfinite(b.dq)).item<bool>());
  }
}

TEST(AttentionAdditiveMask, Gradcheck) {
  // Gradients flow to q, k, v and to the additive mask itself (a learned bias),
  // with -inf entries and one row that is -inf throughout.
  Tensor a = leaf({1, 2, 3, 4}, 5, -1, 1);
  Tensor blocked = tensor<bool>({false, true, false, false, true, true, true, true, false, false, true, false}, {1, 1, 3, 4});
  Tensor bias = leaf({3, 4}, 6, -1, 1);
  for (bool causal : {false, true}) {
    SCOPED_TRACE(fmt::format("causal {}", causal));
    EXPECT_GRADCHECK(
        [&](const std::vector<Tensor>& in) {
          return scaled_dot_product_attention(in[0], in[1], in[2], {.additive_mask = in[3], .causal = causal}).out;
        },
        {leaf({1, 2, 3, 2}, 1), leaf({1, 2, 4, 2}, 2), noncontiguous(leaf({1, 2, 4, 3}, 3)), a});
    // A -inf pattern on a learned bias: the -inf entries get zero gradient.
    EXPECT_GRADCHECK(
        [&](const std::vector<Tensor>& in) {
          Tensor add = masked_fill(in[3], blocked, kNegInf);
          return scaled_dot_product_attention(in[0], in[1], in[2], {.additive_mask = add, .causal = causal}).out;
        },
        {leaf({1, 2, 3, 2}, 7), leaf({1, 2, 4, 2}, 8), leaf({1, 2, 4, 3}, 9), bias});
  }
}

TEST(AttentionAdditiveMask, BFloat16AndErrors) {
  Tensor q = random({1, 2, 3, 4}, 1, kF32), k = random({1, 2, 5, 4}, 2, kF32), v = random({1, 2, 5, 4}, 3, kF32);
  Tensor a = random({3, 5}, 4, kF32);
  Tensor want = scaled_dot_product_attention(to(to(q, kBF16), kF32), to(to(k, kBF16), kF32), to(to(v, kBF16), kF32),
                                             {.additive_mask = to(to(a, kBF16), kF32)})
                    .out;
  Tensor got = scaled_dot_product_attention(to(q, kBF16), to(k, kBF16), to(v, kBF16), {.additive_mask = to(a, kBF16)}).out;
  EXPECT_EQ(got.dtype(), kBF16);
  EXPECT_TRUE(all_close(to(got, kF32), want, 1e-2, 1e-2));
  EXPECT_KILN_ERROR(scaled_dot_product_attention(q, k, v, {.additive_mask = to(a, kF64)}),
                    "[scaled_dot_product_attention] additive_mask must have q's dtype f32, got [3, 5] f64");
  EXPECT_KILN_ERROR(scaled_dot_product_attention(q, k, v, {.additive_mask = random({3, 4}, 4, kF32)}),
                    "additive_mask [3, 4] does not broadcast to [B, H, Tq, Tk] = [1, 2, 3, 5]");
  EXPECT_KILN_ERROR(scaled_dot_product_attention(q, k, v, {.additive_mask = a, .policy = AttentionBackend::Flash}),
                    "the flash path takes no additive_mask");
}

}  // namespace
}  // namespace kiln
