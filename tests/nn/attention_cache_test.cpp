// TransformerBlock's LLaMA options (RMSNorm, SwiGLU, rotary q/k) and
// MultiheadAttention's KV cache: gradchecks in f64, names, cached decoding
// against the full causal pass, and the error messages. The PyTorch golden of
// the whole LLaMA-style stack is tests/models/causal_lm_test.cpp's.
// Legend: B batch, T tokens, D width, H heads, Dh = D / H, F MLP width.
#include <gtest/gtest.h>

#include "kiln/nn/attention.h"
#include "tests/nn/parity.h"

namespace kiln::nn {
namespace {
using namespace testing;

TEST(TransformerBlock, LlamaOptionsGradcheck) {
  Rngs rngs(0);
  Init init(rngs);
  init.dtype = kF64;
  TransformerBlock block(8, 2, init,
                        {.dim_feedforward = 6,
                         .activation = TransformerActivation::swiglu,
                         .norm = TransformerNorm::rms_norm,
                         .rotary = true,
                         .causal = true,
                         .bias = false});
  {
    NoGradGuard g;  // norms away from one, so their gradients are checked
    Generator gen(4);
    copy_(block.rms_norm1->weight.value(), add(randn({8}, gen, {.dtype = kF64}), 1.0));
  }
  std::vector<Tensor> in{leaf({2, 3, 8}, 1)};
  for (const auto& [name, p] : block.named_parameters()) in.push_back(p.value());
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& x) { return block.forward(x[0]); }, in);
}

TEST(TransformerBlock, LlamaOptionsNamesAndRepr) {
  Rngs rngs(0);
  TransformerBlock block(8, 2, rngs,
                        {.dim_feedforward = 6, .activation = TransformerActivation::swiglu,
                         .norm = TransformerNorm::rms_norm, .rotary = true, .bias = false});
  EXPECT_FALSE(block.norm1);
  EXPECT_TRUE(block.rms_norm1 && block.rms_norm2);
  EXPECT_EQ(block.linear1->weight.shape(), (Shape{12, 8}));  // [2F, D]: gate, then up
  EXPECT_EQ(block.linear2->weight.shape(), (Shape{8, 6}));
  EXPECT_EQ(state_dict_keys(block),
            (std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.out_proj.weight", "linear1.weight",
                                      "linear2.weight", "norm1.weight", "norm2.weight"}));
  const std::string r = block.repr();
  EXPECT_NE(r.find("activation=swiglu"), std::string::npos) << r;
  EXPECT_NE(r.find("norm=rms_norm, rotary=true"), std::string::npos) << r;
  EXPECT_NE(r.find("(norm1): RMSNorm"), std::string::npos) << r;
  EXPECT_NE(r.find("rotary=true, rotary_base=10000"), std::string::npos) << r;
}

// Appending chunks of 2, 1 and 3 tokens to the cache gives the full causal
// pass's rows, with rotary and biases.
TEST(MultiheadAttention, KvCacheMatchesFullCausalPass) {
  for (bool rotary : {false, true}) {
    SCOPED_TRACE(rotary);
    Rngs rngs(1);
    Init init(rngs);
    init.bias = init::uniform(-0.5, 0.5);
    MultiheadAttention mha(8, 2, init, {.rotary = rotary});
    Generator gen(2);
    Tensor x = randn({2, 6, 8}, gen);
    NoGradGuard g;
    AttentionOutput all = mha.forward(x, x, x, {.causal = true});  // with weights (the default)
    const Tensor& full = all.output;
    KVCache cache = mha.make_cache(2, 8);
    EXPECT_EQ(cache.key.shape(), (Shape{2, 2, 8, 4}));
    EXPECT_EQ(cache.capacity(), 8);
    int64_t at = 0;
    for (int64_t n : {2, 1, 3}) {
      Tensor chunk = narrow(x, 1, at, n).contiguous();
      // Flash path, no weights (as generation runs it).
      AttentionOutput r = mha.forward(chunk, chunk, chunk, {.causal = true, .need_weights = false, .cache = &cache});
      EXPECT_TRUE(all_close(r.output, narrow(full, 1, at, n), 1e-5, 1e-6)) << "at " << at;
      EXPECT_FALSE(r.weights.defined());
      at += n;
      EXPECT_EQ(cache.length, at);
    }
    // With weights (the default): the new query's row over the cached keys
    // equals the full pass's last row, over all 6 keys.
    KVCache c2 = mha.make_cache(2, 8);
    Tensor first5 = narrow(x, 1, 0, 5).contiguous();
    mha.forward(first5, first5, first5, {.causal = true, .need_weights = false, .cache = &c2});
    Tensor last = narrow(x, 1, 5, 1).contiguous();
    AttentionOutput r = mha.forward(last, last, last, {.causal = true, .cache = &c2});
    EXPECT_EQ(r.weights.shape(), (Shape{2, 1, 6}));
    EXPECT_TRUE(all_close(r.weights, narrow(all.weights, 1, 5, 1), 1e-5, 1e-6));
  }
}

TEST(MultiheadAttention, KvCacheErrors) {
  Rngs rngs(0);
  MultiheadAttention mha(8, 2, rngs);
  Tensor x = ones({1, 3, 8});
  KVCache cache = mha.make_cache(1, 4);
  EXPECT_KILN_ERROR(mha.forward(x, x, x, {.cache = &cache}), "[MultiheadAttention] a KV cache is for inference");
  NoGradGuard g;
  EXPECT_KILN_ERROR(mha.forward(x, x, x, {.mask = causal_mask(3), .cache = &cache}),
                    "a call with a KV cache takes no mask or additive_mask");
  mha.forward(x, x, x, {.causal = true, .cache = &cache});
  EXPECT_KILN_ERROR(mha.forward(x, x, x, {.causal = true, .cache = &cache}),
                    "[MultiheadAttention] cache holds 3 of 4 positions: 3 more do not fit");
  KVCache other = mha.make_cache(2, 4);
  EXPECT_KILN_ERROR(mha.forward(x, x, x, {.cache = &other}),
                    "cache key [2, 2, 4, 4] f32 and value [2, 2, 4, 4] f32 must be [B, H, capacity, Dh] = [1, 2, "
                    "capacity, 4] f32");
  EXPECT_KILN_ERROR(mha.make_cache(1, 0), "make_cache: batch 1 and capacity 0 must be positive");
  EXPECT_KILN_ERROR(MultiheadAttention(6, 2, rngs, {.rotary = true}),
                    "[MultiheadAttention] rotary needs an even head_dim and a positive base, got head_dim 3");
  EXPECT_KILN_ERROR(TransformerBlock(8, 2, rngs, {.norm = TransformerNorm::rms_norm, .adaln_zero = true, .cond_dim = 2}),
                    "[TransformerBlock] adaln_zero modulates LayerNorms");
}

}  // namespace
}  // namespace kiln::nn
