// MultiheadAttention and TransformerBlock: parity with PyTorch
// (tests/goldens/nn_attention.json: nn.MultiheadAttention, TransformerEncoderLayer
// and a DiT AdaLN-Zero reference), fully masked rows (kiln's spec behaviour,
// PyTorch gives NaN), gradchecks in f64, AdaLN-Zero identity at init,
// dropout with explicit rngs, and the error messages.
// Legend: B batch, T tokens (Tq, Tk), D width, H heads.
#include "kiln/nn/attention.h"

#include <cmath>

#include <gtest/gtest.h>

#include "tests/nn/parity.h"

namespace kiln::nn {
namespace {
using namespace testing;

std::vector<Tensor> with_weights(const AttentionOutput& r) { return {r.output, r.weights}; }

Init f64_init(Rngs& rngs) {
  Init init(rngs);
  init.dtype = kF64;
  init.bias = init::uniform(-0.5, 0.5);  // non-zero biases, so their gradients are checked
  return init;
}

Tensor random(const Shape& s, uint64_t seed, DType t = kF64) {
  Generator gen(seed);
  return randn(s, gen, {.dtype = t});
}

// f(inputs..., parameters...) for gradcheck: the parameters are perturbed in place.
std::vector<Tensor> with_params(std::vector<Tensor> inputs, const Module& m) {
  for (const auto& [name, p] : m.named_parameters()) inputs.push_back(p.value());
  return inputs;
}

// ---- parity with PyTorch ----

TEST(MultiheadAttention, MatchesPyTorch) {
  Rngs rngs(0);
  {
    MultiheadAttention mha(4, 2, rngs);
    expect_parity(mha, parity_case("nn_attention", "mha_self_padding"), [&](const auto& in) {
      return std::vector{mha.forward(in[0], in[0], in[0], {.mask = padding_mask(in[1])}).output};
    });
    expect_parity(mha, parity_case("nn_attention", "mha_self_causal_weights"), [&](const auto& in) {
      return with_weights(mha.forward(in[0], in[0], in[0], {.causal = true, .need_weights = true}));
    });
    expect_parity(mha, parity_case("nn_attention", "mha_cross_per_head"), [&](const auto& in) {
      return with_weights(mha.forward(in[0], in[1], in[2],
                                      {.mask = padding_mask(in[3]), .need_weights = true, .average_attn_weights = false}));
    });
  }
  {
    MultiheadAttention mha(4, 2, rngs, {.bias = false});
    expect_parity(mha, parity_case("nn_attention", "mha_cross_shared_kv_no_bias"),
                  [&](const auto& in) { return std::vector{mha.forward(in[0], in[1], in[1]).output}; });
  }
  {
    MultiheadAttention mha(4, 2, rngs, {.kdim = 5, .vdim = 7});
    EXPECT_FALSE(mha.in_proj_weight.defined());
    expect_parity(mha, parity_case("nn_attention", "mha_kdim_vdim"), [&](const auto& in) {
      return with_weights(mha.forward(in[0], in[1], in[2], {.need_weights = true}));
    });
  }
}

TEST(MultiheadAttention, BothPoliciesMatchPyTorch) {
  // The flash and standard paths behind the layer agree with PyTorch alike.
  Rngs rngs(0);
  for (AttentionBackend policy : {AttentionBackend::Standard, AttentionBackend::Flash}) {
    MultiheadAttention mha(4, 2, rngs, {.policy = policy});
    expect_parity(mha, parity_case("nn_attention", "mha_self_padding"), [&](const auto& in) {
      return std::vector{mha.forward(in[0], in[0], in[0], {.mask = padding_mask(in[1]), .need_weights = false}).output};
    });
  }
}

TEST(MultiheadAttention, DefaultCallReturnsAveragedAndPerHeadWeightsAsPyTorch) {
  // PyTorch's defaults (need_weights=True, average_attn_weights=True) in one
  // call, with the per-head weights PyTorch needs a second call for; values
  // and every gradient (through all three outputs) against PyTorch 1.13.
  Rngs rngs(0);
  MultiheadAttention mha(4, 2, rngs);
  expect_parity(mha, parity_case("nn_attention", "mha_default_weights_and_heads"), [&](const auto& in) {
    AttentionOutput r = mha.forward(in[0], in[1], in[2], {.mask = padding_mask(in[3])});
    EXPECT_EQ(r.weights.shape(), (Shape{2, 3, 5}));
    EXPECT_EQ(r.head_weights.shape(), (Shape{2, 2, 3, 5}));
    return std::vector{r.output, r.weights, r.head_weights};
  });
  // Two-name binding, as PyTorch's `out, w = mha(q, k, v)`.
  Tensor x = random({2, 3, 4}, 1, kF32);
  auto [out, w] = mha.forward(x, x, x);
  EXPECT_EQ(out.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(w.shape(), (Shape{2, 3, 3}));
  // average_attn_weights = false: weights are the per-head ones, the same tensor as head_weights.
  AttentionOutput r = mha.forward(x, x, x, {.average_attn_weights = false});
  EXPECT_TRUE(r.weights.is_same(r.head_weights));
  EXPECT_TRUE(all_close(mean(r.head_weights, {1}), w, 1e-6, 1e-6));
}

TEST(MultiheadAttention, NoWeightsKeepsTheFlashPath) {
  // need_weights = false under Auto runs the fused kernel: it agrees with
  // policy Flash bit for bit, and returns no weights.
  Rngs rngs(0);
  MultiheadAttention mha(8, 2, rngs);
  MultiheadAttention flash(8, 2, rngs, {.policy = AttentionBackend::Flash});
  flash.load_state_dict(mha.state_dict());
  Tensor x = random({2, 6, 8}, 3, kF32);
  AttentionOutput a = mha.forward(x, x, x, {.causal = true, .need_weights = false});
  AttentionOutput f = flash.forward(x, x, x, {.causal = true, .need_weights = false});
  EXPECT_FALSE(a.weights.defined());
  EXPECT_FALSE(a.head_weights.defined());
  EXPECT_TRUE(all_close(a.output, f.output, 0, 0));
  // The default (with weights) takes the standard path: equal up to rounding.
  EXPECT_TRUE(all_close(mha.forward(x, x, x, {.causal = true}).output, a.output, 1e-5, 1e-5));
  // Flash cannot materialise weights: PyTorch's default need_weights = true is refused with the way out.
  EXPECT_KILN_ERROR(flash.forward(x, x, x), "pass need_weights = false (true by default, as in PyTorch)");
}

TEST(TransformerBlock, MatchesTransformerEncoderLayer) {
  Rngs rngs(0);
  TransformerBlock block(4, 2, rngs, {.dim_feedforward = 8});
  expect_parity(block, parity_case("nn_attention", "block"), [&](const auto& in) { return std::vector{block.forward(in[0])}; });
  expect_parity(block, parity_case("nn_attention", "block_padding"),
                [&](const auto& in) { return std::vector{block.forward(in[0], {.mask = padding_mask(in[1])})}; });
  expect_parity(block, parity_case("nn_attention", "block_additive"),
                [&](const auto& in) { return std::vector{block.forward(in[0], {.additive_mask = in[1]})}; });
  TransformerBlock causal(4, 2, rngs, {.dim_feedforward = 8, .causal = true});
  expect_parity(causal, parity_case("nn_attention", "block_causal"),
                [&](const auto& in) { return std::vector{causal.forward(in[0])}; });
  // mlp_ratio gives the same width.
  EXPECT_EQ(TransformerBlock(4, 2, rngs, {.mlp_ratio = 2.0}).dim_feedforward, 8);
}

TEST(TransformerBlock, AdaLNZeroMatchesReference) {
  Rngs rngs(0);
  TransformerBlock block(4, 2, rngs, {.dim_feedforward = 8, .adaln_zero = true, .cond_dim = 3});
  EXPECT_FALSE(block.norm1->weight.defined());
  expect_parity(block, parity_case("nn_attention", "adaln_block"),
                [&](const auto& in) { return std::vector{block.forward(in[0], {.cond = in[1]})}; });
}

TEST(TransformerBlock, AdaLNZeroIsTheIdentityAtInit) {
  Rngs rngs(3);
  TransformerBlock block(8, 2, rngs, {.adaln_zero = true, .cond_dim = 5});
  Tensor x = random({2, 6, 8}, 1, kF32).requires_grad_(true);
  Tensor cond = random({2, 5}, 2, kF32);
  Tensor y = block.forward(x, {.cond = cond});
  EXPECT_TRUE(all_close(y, x.detach(), 0, 0));
  // The gates are zero, but the modulation's weight still learns (its gradient
  // comes through the gates), the sublayers do not yet.
  sum(mul(y, random({2, 6, 8}, 3, kF32))).backward();
  EXPECT_GT(max(abs(block.adaLN_modulation->weight.grad())).item<float>(), 0.0f);
  EXPECT_EQ(max(abs(block.linear2->weight.grad())).item<float>(), 0.0f);
  EXPECT_TRUE(all_close(x.grad(), random({2, 6, 8}, 3, kF32), 0, 0));
}

// ---- fully masked rows: zero weights and output, out_proj.bias included ----

TEST(MultiheadAttention, FullyMaskedRowsAreZeroWithFiniteGradients) {
  Rngs rngs(0);
  Init init = f64_init(rngs);
  MultiheadAttention mha(6, 2, init);
  // Batch 1 has no valid key; in batch 0, causal with Tq > Tk leaves query 0 without a key.
  Tensor valid = tensor<bool>({true, true, true, false, false, false}, {2, 3});
  for (AttentionBackend policy : {AttentionBackend::Standard, AttentionBackend::Flash}) {
    mha.policy = policy;
    mha.zero_grad();
    Tensor q = random({2, 4, 6}, 1).requires_grad_(true), kv = random({2, 3, 6}, 2).requires_grad_(true);
    const bool weights = policy == AttentionBackend::Standard;
    AttentionOutput r = mha.forward(q, kv, kv, {.mask = padding_mask(valid), .causal = true, .need_weights = weights});
    EXPECT_TRUE(all_close(r.output.select(0, 1), zeros({4, 6}, {.dtype = kF64}), 0, 0)) << "batch 1";
    EXPECT_TRUE(all_close(r.output.select(0, 0).select(0, 0), zeros({6}, {.dtype = kF64}), 0, 0)) << "row 0";
    EXPECT_GT(max(abs(r.output.select(0, 0).select(0, 1))).item<double>(), 0.0);
    if (weights) {
      EXPECT_EQ(r.weights.shape(), (Shape{2, 4, 3}));
      EXPECT_TRUE(all_close(r.weights.select(0, 1), zeros({4, 3}, {.dtype = kF64}), 0, 0));
    }
    sum(mul(r.output, random({2, 4, 6}, 3))).backward();
    for (const Tensor& g : {q.grad(), kv.grad(), mha.in_proj_weight.grad(), mha.in_proj_bias.grad(),
                            mha.out_proj->weight.grad(), mha.out_proj->bias.grad()})
      EXPECT_TRUE(all(isfinite(g)).item<bool>());
    EXPECT_TRUE(all_close(q.grad().select(0, 1), zeros({4, 6}, {.dtype = kF64}), 0, 0));
    EXPECT_TRUE(all_close(kv.grad().select(0, 1), zeros({3, 6}, {.dtype = kF64}), 0, 0));
  }
  // The same rows through an additive mask of -inf.
  mha.policy = AttentionBackend::Auto;
  Tensor additive = masked_fill(zeros({2, 1, 1, 3}, {.dtype = kF64}), logical_not(padding_mask(valid)), -INFINITY);
  AttentionOutput r = mha.forward(random({2, 4, 6}, 1), random({2, 3, 6}, 2), random({2, 3, 6}, 2),
                                  {.additive_mask = additive});
  EXPECT_TRUE(all_close(r.output.select(0, 1), zeros({4, 6}, {.dtype = kF64}), 0, 0));
  // A row masked in one head only is not fully masked: it keeps the bias.
  Tensor per_head = ones({1, 2, 4, 3}, {.dtype = kBool});
  fill_(per_head.select(1, 0).select(1, 2), false);
  Tensor x = random({1, 4, 6}, 4), mem = random({1, 3, 6}, 5);
  Tensor out = mha.forward(x, mem, mem, {.mask = per_head}).output;
  EXPECT_GT(max(abs(out.select(1, 2))).item<double>(), 0.0);
}

TEST(MultiheadAttention, GradcheckFullyMaskedRowsIncludingParameters) {
  Rngs rngs(0);
  Init init = f64_init(rngs);
  MultiheadAttention mha(4, 2, init);
  Tensor mask = padding_mask(tensor<bool>({true, false, true, false, false, false}, {2, 3}));
  EXPECT_GRADCHECK(
      [&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[1], in[1], {.mask = mask}).output; },
      with_params({leaf({2, 2, 4}, 1), leaf({2, 3, 4}, 2)}, mha));
}

// ---- gradchecks in f64 over input and parameters ----

TEST(MultiheadAttention, Gradcheck) {
  Rngs rngs(0);
  Init init = f64_init(rngs);
  MultiheadAttention mha(4, 2, init);
  // Self-attention (the one-GEMM path), causal, with weights.
  EXPECT_GRADCHECK(
      [&](const std::vector<Tensor>& in) {
        return with_weights(mha.forward(in[0], in[0], in[0], {.causal = true, .need_weights = true}));
      },
      with_params({leaf({2, 3, 4}, 1)}, mha));
  // Cross-attention, distinct key and value, a non-contiguous query, per-head weights.
  EXPECT_GRADCHECK(
      [&](const std::vector<Tensor>& in) {
        return with_weights(mha.forward(in[0], in[1], in[2], {.need_weights = true, .average_attn_weights = false}));
      },
      with_params({noncontiguous(leaf({2, 2, 4}, 2)), leaf({2, 3, 4}, 3), leaf({2, 3, 4}, 4)}, mha));
  MultiheadAttention kv(4, 2, init, {.bias = false, .kdim = 3, .vdim = 5});
  EXPECT_GRADCHECK(
      [&](const std::vector<Tensor>& in) { return kv.forward(in[0], in[1], in[2]).output; },
      with_params({leaf({1, 2, 4}, 5), leaf({1, 3, 3}, 6), leaf({1, 3, 5}, 7)}, kv));
}

TEST(TransformerBlock, Gradcheck) {
  Rngs rngs(0);
  Init init = f64_init(rngs);
  TransformerBlock block(4, 2, init, {.dim_feedforward = 6, .causal = true});
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return block.forward(in[0], {.additive_mask = in[1]}); },
                   with_params({leaf({2, 3, 4}, 1), leaf({3, 3}, 9)}, block));
  TransformerBlock adaln(4, 2, init, {.dim_feedforward = 6, .adaln_zero = true, .cond_dim = 2});
  {
    NoGradGuard g;  // leave zero init so the modulation path is exercised
    copy_(adaln.adaLN_modulation->weight.value(), random({24, 2}, 10));
    copy_(adaln.adaLN_modulation->bias.value(), random({24}, 11));
  }
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return adaln.forward(in[0], {.cond = in[1]}); },
                   with_params({leaf({2, 3, 4}, 2), leaf({2, 2}, 3)}, adaln));
}

// ---- self-attention fast path, dropout, names, repr ----

TEST(MultiheadAttention, SelfAttentionFastPathEqualsSeparateProjections) {
  Rngs rngs(0);
  Init init = f64_init(rngs);
  MultiheadAttention mha(8, 4, init);
  Tensor x = random({2, 5, 8}, 1);
  Tensor a = mha.forward(x, x, x).output;
  Tensor b = mha.forward(x, clone(x), clone(x)).output;  // three GEMMs
  Tensor c = mha.forward(x, clone(x), x).output;         // distinct key: three GEMMs
  Tensor kv = clone(x);
  Tensor d = mha.forward(x, kv, kv).output;  // shared key/value: two GEMMs
  EXPECT_TRUE(all_close(a, b, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(a, c, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(a, d, 1e-12, 1e-12));
}

TEST(MultiheadAttention, DropoutDrawsFromRngsAndIsIdentityInEval) {
  Rngs rngs(0);
  MultiheadAttention mha(8, 2, rngs, {.dropout = 0.5});
  Tensor x = random({2, 5, 8}, 1, kF32);
  EXPECT_KILN_ERROR(mha.forward(x, x, x),
                    "[MultiheadAttention] dropout 0.5 in training draws from rngs: call forward(query, key, value, rngs, ...) or eval()");
  Rngs a{{"dropout", 7}}, b{{"dropout", 7}};
  AttentionOutput ra = mha.forward(x, x, x, a, {.need_weights = true, .average_attn_weights = false});
  AttentionOutput rb = mha.forward(x, x, x, b, {.need_weights = true, .average_attn_weights = false});
  EXPECT_TRUE(all_close(ra.output, rb.output, 0, 0)) << "same stream, same mask";
  // Dropped weights are 0, kept ones scaled by 2: some rows no longer sum to 1.
  EXPECT_TRUE(any(eq(ra.weights, 0)).item<bool>());
  AttentionOutput rc = mha.forward(x, x, x, a);
  EXPECT_FALSE(all_close(ra.output, rc.output, 1e-3, 1e-3)) << "the stream advanced";
  mha.eval();
  Tensor e1 = mha.forward(x, x, x).output, e2 = mha.forward(x, x, x, a).output;
  MultiheadAttention none(8, 2, rngs);
  none.load_state_dict(mha.state_dict());
  EXPECT_TRUE(all_close(e1, none.forward(x, x, x).output, 0, 0));
  EXPECT_TRUE(all_close(e2, e1, 0, 0));
}

TEST(TransformerBlock, DropoutDrawsFromRngs) {
  Rngs rngs(0);
  TransformerBlock block(8, 2, rngs, {.dropout = 0.25});
  Tensor x = random({2, 5, 8}, 1, kF32);
  EXPECT_KILN_ERROR(block.forward(x), "[TransformerBlock] dropout 0.25 in training draws from rngs");
  Rngs a{{"dropout", 1}}, b{{"dropout", 1}};
  EXPECT_TRUE(all_close(block.forward(x, a), block.forward(x, b), 0, 0));
  block.eval();
  EXPECT_TRUE(all_close(block.forward(x), block.forward(x, a), 0, 0));
}

TEST(TransformerBlock, NamesAndRepr) {
  Rngs rngs(0);
  TransformerBlock block(8, 2, rngs);
  std::vector<std::string> names;
  for (const auto& [n, p] : block.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias",
                                             "self_attn.out_proj.weight", "self_attn.out_proj.bias", "linear1.weight",
                                             "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight",
                                             "norm1.bias", "norm2.weight", "norm2.bias"}));
  EXPECT_EQ(block.self_attn->in_proj_weight.shape(), (Shape{24, 8}));
  EXPECT_EQ(block.linear1->weight.shape(), (Shape{32, 8}));
  EXPECT_FALSE(block.norm1->weight.decay());
  EXPECT_FALSE(block.self_attn->in_proj_bias.decay());
  const std::string r = block.repr();
  EXPECT_NE(r.find("TransformerBlock(dim=8, num_heads=2, dim_feedforward=32, dropout=0, activation=gelu"), std::string::npos) << r;
  EXPECT_NE(r.find("(self_attn): MultiheadAttention(embed_dim=8, num_heads=2, dropout=0, bias=true\n"), std::string::npos) << r;
  EXPECT_NE(r.find("(norm1): LayerNorm((8,), eps=1e-05, elementwise_affine=true)"), std::string::npos) << r;
  TransformerBlock adaln(8, 2, rngs, {.adaln_zero = true, .cond_dim = 4});
  EXPECT_EQ(adaln.adaLN_modulation->weight.shape(), (Shape{48, 4}));
  EXPECT_EQ(adaln.num_parameters(), block.num_parameters() - 32 + 48 * 4 + 48);
}

TEST(TransformerBlock, BFloat16) {
  // A bf16 block (the op computes attention in f32) against its f32 self.
  Rngs rngs(0);
  TransformerBlock block(8, 2, rngs, {.causal = true});
  Tensor x = random({2, 5, 8}, 1, kF32);
  Tensor valid = tensor<bool>({true, true, true, true, true, true, true, false, false, false}, {2, 5});
  Tensor want = block.forward(x, {.mask = padding_mask(valid)});
  block.to(kBF16);
  Tensor xb = to(x, kBF16).requires_grad_(true);
  Tensor got = block.forward(xb, {.mask = padding_mask(valid)});
  EXPECT_EQ(got.dtype(), kBF16);
  EXPECT_TRUE(all_close(to(got, kF32), want, 5e-2, 5e-2));
  sum(got).backward();
  EXPECT_EQ(block.self_attn->in_proj_weight.grad().dtype(), kBF16);
  EXPECT_TRUE(all(isfinite(xb.grad())).item<bool>());
}

// ---- errors ----

TEST(MultiheadAttention, Errors) {
  Rngs rngs(0);
  EXPECT_KILN_ERROR(MultiheadAttention(10, 3, rngs), "[MultiheadAttention] embed_dim 10 is not divisible by num_heads 3");
  EXPECT_KILN_ERROR(MultiheadAttention(8, 0, rngs), "embed_dim 8 and num_heads 0 must be positive");
  EXPECT_KILN_ERROR(MultiheadAttention(8, 2, rngs, {.dropout = 1.5}), "dropout must be in [0, 1], got 1.5");
  EXPECT_KILN_ERROR(MultiheadAttention(8, 2, rngs, {.dropout = 0.1, .policy = AttentionBackend::Flash}),
                    "use policy Auto or Standard, not Flash");
  MultiheadAttention mha(8, 2, rngs);
  Tensor x = ones({2, 5, 8}), kv = ones({2, 6, 8});
  EXPECT_KILN_ERROR(mha.forward(ones({5, 8}), kv, kv),
                    "[MultiheadAttention] query, key and value must be 3-D [B, T, features], got query [5, 8]");
  EXPECT_KILN_ERROR(mha.forward(ones({2, 5, 7}), kv, kv), "query [2, 5, 7] has 7 features, expected embed_dim 8");
  EXPECT_KILN_ERROR(mha.forward(x, ones({2, 6, 4}), kv), "key [2, 6, 4] has 4 features, expected kdim 8");
  EXPECT_KILN_ERROR(mha.forward(x, kv, ones({2, 6, 3})), "value [2, 6, 3] has 3 features, expected vdim 8");
  EXPECT_KILN_ERROR(mha.forward(x, ones({3, 6, 8}), ones({3, 6, 8})), "batch sizes differ: query [2, 5, 8], key [3, 6, 8]");
  EXPECT_KILN_ERROR(mha.forward(x, kv, ones({2, 7, 8})), "key [2, 6, 8] and value [2, 7, 8] differ in length (Tk 6 vs 7)");
  EXPECT_KILN_ERROR(mha.forward(to(x, kF64), kv, kv), "query [2, 5, 8] f64, key [2, 6, 8] f32 and value [2, 6, 8] f32 must have the layer's dtype f32");
  EXPECT_KILN_ERROR(mha.forward(x, kv, kv, {.mask = ones({2, 1, 1, 6})}), "mask [2, 1, 1, 6] f32 must be bool (true = allowed)");
  EXPECT_KILN_ERROR(mha.forward(x, kv, kv, {.mask = padding_mask(ones({2, 5}, {.dtype = kBool}))}),
                    "mask [2, 1, 1, 5] does not broadcast to [B, num_heads, Tq, Tk] = [2, 2, 5, 6]");
  EXPECT_KILN_ERROR(mha.forward(x, kv, kv, {.additive_mask = ones({5, 6}, {.dtype = kF64})}),
                    "additive_mask [5, 6] f64 must have the layer's dtype f32");
  EXPECT_KILN_ERROR(mha.forward(x, kv, kv, {.additive_mask = ones({6, 6})}),
                    "additive_mask [6, 6] does not broadcast to [B, num_heads, Tq, Tk] = [2, 2, 5, 6]");
  MultiheadAttention flash(8, 2, rngs, {.policy = AttentionBackend::Flash});
  EXPECT_KILN_ERROR(flash.forward(x, kv, kv, {.need_weights = true}), "policy Flash cannot return weights");
  EXPECT_KILN_ERROR(mha.forward(x, Tensor(), kv), "query, key and value must be defined");
}

TEST(TransformerBlock, Errors) {
  Rngs rngs(0);
  EXPECT_KILN_ERROR(TransformerBlock(10, 4, rngs), "[TransformerBlock] dim 10 is not divisible by num_heads 4");
  EXPECT_KILN_ERROR(TransformerBlock(8, 2, rngs, {.dim_feedforward = 0}), "dim_feedforward 0 (mlp_ratio 4) must be positive");
  EXPECT_KILN_ERROR(TransformerBlock(8, 2, rngs, {.adaln_zero = true}), "adaln_zero needs cond_dim > 0, got 0");
  EXPECT_KILN_ERROR(TransformerBlock(8, 2, rngs, {.cond_dim = 3}), "cond_dim 3 is given but adaln_zero is off");
  EXPECT_KILN_ERROR(TransformerBlock(8, 2, rngs, {.norm_eps = 0}), "norm_eps must be positive, got 0");
  TransformerBlock block(8, 2, rngs);
  EXPECT_KILN_ERROR(block.forward(ones({2, 5, 6})), "[TransformerBlock] x [2, 5, 6] must be [B, T, D = 8]");
  EXPECT_KILN_ERROR(block.forward(ones({2, 5, 8}, {.dtype = kF64})), "x [2, 5, 8] f64 must have the block's dtype f32");
  EXPECT_KILN_ERROR(block.forward(ones({2, 5, 8}), {.cond = ones({2, 3})}), "cond [2, 3] is given but adaln_zero is off");
  EXPECT_KILN_ERROR(block.forward(ones({2, 5, 8}), {.mask = ones({1, 1, 5, 5})}), "[MultiheadAttention] mask [1, 1, 5, 5] f32 must be bool");
  TransformerBlock adaln(8, 2, rngs, {.adaln_zero = true, .cond_dim = 3});
  EXPECT_KILN_ERROR(adaln.forward(ones({2, 5, 8})), "adaln_zero needs cond [B, cond_dim] = [2, 3]");
  EXPECT_KILN_ERROR(adaln.forward(ones({2, 5, 8}), {.cond = ones({2, 4})}),
                    "cond [2, 4] f32 must be [B, cond_dim] = [2, 3] f32 for x [2, 5, 8]");
}

}  // namespace
}  // namespace kiln::nn
