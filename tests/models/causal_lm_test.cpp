// models::CausalLM: nanoGPT's GPT (bias) and a LLaMA-style model (RMSNorm,
// rotary, SwiGLU, untied head) against PyTorch goldens; the config's JSON form
// and its errors; the KV cache against the full forward pass.
#include <cmath>

#include <gtest/gtest.h>

#include "kiln/core/grad_mode.h"
#include "kiln/models/causal_lm.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/index.h"
#include "kiln/ops/random.h"
#include "kiln/ops/shape.h"
#include "tests/support/models_testing.h"

namespace kiln::models {
namespace {

using testing::all_close;
using testing::golden_tensor;

// The goldens' shapes (tools/goldens/causal_lm.py): V 11, T 6, L 2, H 2, C 8.
CausalLMConfig golden_config(bool llama) {
  const auto& c = testing::golden("models_causal_lm").at("config");
  CausalLMConfig cfg{.vocab_size = c.at("vocab_size").get<int64_t>(),
                     .block_size = c.at("block_size").get<int64_t>(),
                     .n_layer = c.at("n_layer").get<int64_t>(),
                     .n_head = c.at("n_head").get<int64_t>(),
                     .n_embd = c.at("n_embd").get<int64_t>()};
  if (llama) {
    cfg.norm = nn::TransformerNorm::rms_norm;
    cfg.norm_eps = 1e-6;
    cfg.learned_positions = false;
    cfg.rotary = true;
    cfg.mlp = nn::TransformerActivation::swiglu;
    cfg.mlp_hidden = c.at("llama_mlp_hidden").get<int64_t>();
    cfg.tie_weights = false;
  } else {
    cfg.bias = true;
  }
  return cfg;
}

// The same weights as PyTorch give the same logits, loss and every gradient (f64).
void check_golden(bool llama) {
  const auto& j = testing::golden("models_causal_lm").at(llama ? "llama" : "gpt");
  Rngs rngs(0);
  CausalLM lm(golden_config(llama), rngs);
  lm.to(kF64);
  nn::StateDict state;
  for (const auto& [k, v] : j.at("state").items()) state.insert(k, golden_tensor(v));
  lm.load_state_dict(state);
  EXPECT_EQ(lm.state_dict().size(), state.size());
  Tensor idx = golden_tensor(j.at("idx")), targets = golden_tensor(j.at("targets"));
  Tensor expected = golden_tensor(j.at("logits"));
  EXPECT_TRUE(all_close(lm.forward(idx), expected, 1e-10, 1e-12));
  Tensor flat = lm.logits(idx);  // [B * T, V]: row b * T + t
  EXPECT_EQ(flat.shape(), (Shape{2 * 6, 11}));
  EXPECT_TRUE(all_close(flat, reshape(expected, {12, 11}), 1e-10, 1e-12));
  Tensor loss = lm.loss(idx, targets);
  EXPECT_NEAR(loss.item<double>(), j.at("loss").get<double>(), 1e-12);
  loss.backward();
  for (const auto& [name, p] : lm.named_parameters()) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(all_close(p.grad(), golden_tensor(j.at("grads").at(name)), 1e-8, 1e-12));
  }
  EXPECT_EQ(lm.named_parameters().size(), j.at("grads").size());
}

TEST(CausalLM, GptWithBiasMatchesPyTorch) { check_golden(false); }
TEST(CausalLM, LlamaStyleMatchesPyTorch) { check_golden(true); }

TEST(CausalLM, LlamaStyleLayout) {
  Rngs rngs(0);
  CausalLM lm(golden_config(true), rngs);
  std::vector<std::string> k = testing::state_dict_keys(lm);
  EXPECT_EQ(k.front(), "transformer.wte.weight");
  EXPECT_EQ(k[1], "transformer.h.0.self_attn.in_proj_weight");  // no wpe
  for (const auto& key : k) EXPECT_EQ(key.find("bias"), std::string::npos) << key;
  EXPECT_EQ(k.back(), "lm_head.weight");
  EXPECT_FALSE(lm.wpe);
  EXPECT_FALSE(lm.ln_f);
  EXPECT_TRUE(lm.rms_f);
  EXPECT_FALSE(lm.lm_head->weight.value().is_same(lm.wte->weight.value()));
  EXPECT_EQ(lm.h[0]->linear1->weight.shape(), (Shape{24, 8}));  // [2F, C]: gate rows, then up
  EXPECT_EQ(lm.h[0]->linear2->weight.shape(), (Shape{8, 12}));
  // V C (wte) + L (2 C norms + 3 C C + C C + 2F C + F C) + C + V C (lm_head)
  EXPECT_EQ(lm.num_parameters(), 88 + 2 * (16 + 192 + 64 + 192 + 96) + 8 + 88);
  // The default SwiGLU width: 2/3 * 4C rounded up to 64.
  EXPECT_EQ((CausalLMConfig{.n_embd = 128, .mlp = nn::TransformerActivation::swiglu}.hidden()), 384);
  EXPECT_EQ(CausalLMConfig{}.hidden(), 512);
}

TEST(CausalLM, ConfigJsonRoundTrip) {
  const CausalLMConfig llama = golden_config(true);
  const std::string s = llama.to_json();
  EXPECT_NE(s.find("\"norm\":\"rms_norm\""), std::string::npos) << s;
  EXPECT_NE(s.find("\"mlp\":\"swiglu\""), std::string::npos) << s;
  const CausalLMConfig back = CausalLMConfig::from_json(s);
  EXPECT_EQ(back.to_json(), s);
  EXPECT_EQ(back.norm, nn::TransformerNorm::rms_norm);
  EXPECT_EQ(back.mlp, nn::TransformerActivation::swiglu);
  EXPECT_EQ(back.mlp_hidden, 12);
  EXPECT_EQ(back.norm_eps, 1e-6);
  EXPECT_FALSE(back.tie_weights);
  EXPECT_TRUE(back.rotary);
  EXPECT_EQ(CausalLMConfig::from_json(CausalLMConfig{}.to_json()).to_json(), CausalLMConfig{}.to_json());
  // nanoGPT's fields alone: the rest keep GPT's defaults.
  const CausalLMConfig gpt = CausalLMConfig::from_json(R"({"vocab_size": 50, "n_layer": 2, "dropout": 0.1})");
  EXPECT_EQ(gpt.vocab_size, 50);
  EXPECT_EQ(gpt.n_layer, 2);
  EXPECT_EQ(gpt.dropout, 0.1);
  EXPECT_EQ(gpt.block_size, 64);
  EXPECT_TRUE(gpt.learned_positions && gpt.tie_weights && !gpt.rotary);
}

// Issue 23: a checkpoint whose config said n_embd 1e9 aborted `kiln generate`.
// Sizes are bounded, and a bad value is quoted briefly (a value nested a
// million deep must not overflow the stack while the message is written).
TEST(CausalLM, ConfigSizesAreBoundedAndBadValuesQuotedBriefly) {
  EXPECT_KILN_ERROR(CausalLMConfig::from_json(R"({"n_embd": 1000000000, "n_head": 1})"),
                    "[CausalLM] n_embd 1000000000 is larger than any model kiln can hold (at most 2^24 = 16777216)");
  EXPECT_KILN_ERROR(CausalLMConfig::from_json(R"({"vocab_size": 9223372036854775807})"), "vocab_size 9223372036854775807");
  EXPECT_KILN_ERROR(CausalLMConfig::from_json(R"({"n_layer": 18446744073709551615})"), "must be positive");
  const std::string deep = "{\"n_head\": " + std::string(200000, '[') + std::string(200000, ']') + "}";
  EXPECT_KILN_ERROR(CausalLMConfig::from_json(deep), "config field 'n_head' must be an integer, got an array of 1");
  EXPECT_KILN_ERROR(CausalLMConfig::from_json(R"({"norm": [1, 2]})"), "got [1, 2]");
}

TEST(CausalLM, ConfigErrors) {
  EXPECT_KILN_ERROR(CausalLMConfig::from_json("not json"), "[CausalLM] config JSON must be an object");
  EXPECT_KILN_ERROR(CausalLMConfig::from_json("[1]"), "[CausalLM] config JSON must be an object");
  EXPECT_KILN_ERROR(CausalLMConfig::from_json(R"({"n_layers": 2})"), "[CausalLM] unknown config field 'n_layers'");
  EXPECT_KILN_ERROR(CausalLMConfig::from_json(R"({"n_head": 2.5})"),
                    "[CausalLM] config field 'n_head' must be an integer, got 2.5");
  EXPECT_KILN_ERROR(CausalLMConfig::from_json(R"({"bias": 1})"), "config field 'bias' must be true or false, got 1");
  EXPECT_KILN_ERROR(CausalLMConfig::from_json(R"({"dropout": "0.1"})"),
                    "config field 'dropout' must be a number, got \"0.1\"");
  EXPECT_KILN_ERROR(CausalLMConfig::from_json(R"({"norm": "batch_norm"})"),
                    "config field 'norm' must be \"layer_norm\" or \"rms_norm\", got \"batch_norm\"");
  EXPECT_KILN_ERROR(CausalLMConfig::from_json(R"({"mlp": "geglu"})"), "config field 'mlp' must be");
  EXPECT_KILN_ERROR(CausalLMConfig::from_json(R"({"n_embd": 100, "n_head": 3})"),
                    "[CausalLM] n_embd 100 is not divisible by n_head 3");
  EXPECT_KILN_ERROR(CausalLMConfig::from_json(R"({"vocab_size": 0})"), "must be positive");
  EXPECT_KILN_ERROR(CausalLMConfig::from_json(R"({"n_embd": 6, "n_head": 2, "rotary": true})"),
                    "rotary needs an even head width n_embd / n_head");
  EXPECT_KILN_ERROR(CausalLMConfig::from_json(R"({"mlp_hidden": -1})"), "mlp_hidden must be >= 0");
  EXPECT_KILN_ERROR(CausalLMConfig::from_json(R"({"norm_eps": 0})"), "norm_eps must be positive");
  Rngs rngs(0);
  EXPECT_KILN_ERROR(CausalLM({.dropout = -0.5}, rngs), "[CausalLM] dropout must be in [0, 1), got -0.5");
}

// Decoding with the cache, a prompt prefill then one token at a time, gives the
// full forward pass's logits at every position (f32), for both layouts.
void check_cache(bool llama) {
  CausalLMConfig cfg = golden_config(llama);
  cfg.block_size = 12;
  cfg.n_embd = 16;
  cfg.mlp_hidden = llama ? 24 : 0;
  Rngs rngs(3);
  CausalLM lm(cfg, rngs);
  Generator g(5);
  Tensor idx = randint(0, cfg.vocab_size, {2, 12}, g);
  NoGradGuard no_grad;
  Tensor full = lm.forward(idx);  // [2, 12, V]
  for (int64_t prompt : {1, 5}) {
    SCOPED_TRACE(prompt);
    CausalLMCache cache = lm.make_cache(2);
    EXPECT_EQ(cache.layers.size(), 2u);
    EXPECT_EQ(cache.layers[0].key.shape(), (Shape{2, 2, 12, 8}));  // [B, H, block_size, Dh]
    Tensor first = lm.forward_cached(narrow(idx, 1, 0, prompt), cache);
    EXPECT_EQ(first.shape(), (Shape{2, prompt, cfg.vocab_size}));
    EXPECT_TRUE(all_close(first, narrow(full, 1, 0, prompt), 1e-5, 1e-6));
    EXPECT_EQ(cache.length(), prompt);
    for (int64_t t = prompt; t < 12; ++t) {
      Tensor step = lm.forward_cached(narrow(idx, 1, t, 1), cache);  // [2, 1, V]
      EXPECT_EQ(step.shape(), (Shape{2, 1, cfg.vocab_size}));
      EXPECT_TRUE(all_close(step, narrow(full, 1, t, 1), 1e-5, 1e-6)) << "t " << t;
    }
    EXPECT_EQ(cache.length(), 12);
    EXPECT_KILN_ERROR(lm.forward_cached(narrow(idx, 1, 0, 1), cache),
                      "[CausalLM] idx [2, 1] adds T = 1 tokens to a cache holding 12; block_size is 12");
    cache.clear();  // reuse: the same as a fresh cache
    EXPECT_TRUE(all_close(lm.forward_cached(idx, cache), full, 1e-5, 1e-6));
  }
}

TEST(CausalLM, KvCacheMatchesFullForwardGpt) { check_cache(false); }
TEST(CausalLM, KvCacheMatchesFullForwardLlama) { check_cache(true); }

TEST(CausalLM, KvCacheErrors) {
  Rngs rngs(0);
  CausalLM lm({.vocab_size = 7, .block_size = 4, .n_layer = 1, .n_head = 2, .n_embd = 8}, rngs);
  CausalLMCache cache = lm.make_cache(1);
  Tensor idx = zeros({1, 3}, {.dtype = kI64});
  EXPECT_KILN_ERROR(lm.forward_cached(idx, cache), "[CausalLM] forward_cached is for inference: run it under NoGradGuard");
  NoGradGuard no_grad;
  EXPECT_KILN_ERROR(lm.forward_cached(zeros({2, 3}, {.dtype = kI64}), cache),
                    "[CausalLM] idx [2, 3] has B = 2; the cache is for batch 1");
  EXPECT_KILN_ERROR(lm.forward_cached(zeros({1, 5}, {.dtype = kI64}), cache),
                    "adds T = 5 tokens to a cache holding 0; block_size is 4");
  lm.forward_cached(idx, cache);
  EXPECT_KILN_ERROR(lm.forward_cached(zeros({1, 2}, {.dtype = kI64}), cache),
                    "adds T = 2 tokens to a cache holding 3; block_size is 4");
  CausalLMCache empty;
  EXPECT_KILN_ERROR(lm.forward_cached(idx, empty), "[CausalLM] the cache has 0 layers; the model has n_layer 1");
  EXPECT_KILN_ERROR(lm.make_cache(0), "make_cache: batch must be positive, got 0");
  // The layer's own checks: a cache of the wrong shape.
  nn::KVCache bad = lm.h[0]->self_attn->make_cache(1, 4);
  bad.key = zeros({1, 3, 4, 4});
  Tensor x = zeros({1, 1, 8});
  EXPECT_KILN_ERROR(lm.h[0]->self_attn->forward(x, x, x, {.cache = &bad}),
                    "[MultiheadAttention] cache key [1, 3, 4, 4] f32 and value [1, 2, 4, 4] f32 must be");
  nn::KVCache ok = lm.h[0]->self_attn->make_cache(1, 4);
  Tensor y = zeros({1, 1, 8});
  EXPECT_KILN_ERROR(lm.h[0]->self_attn->forward(x, y, y, {.cache = &ok}),
                    "a KV cache is for self-attention");
}

// A call that throws in a later layer (here its cache was replaced by one of
// the wrong dtype) leaves every layer's cache at its old length, and the
// cache keeps working once repaired.
TEST(CausalLM, KvCacheThrowLeavesLengthsUnchanged) {
  Rngs rngs(0);
  CausalLM lm({.vocab_size = 7, .block_size = 6, .n_layer = 3, .n_head = 2, .n_embd = 8}, rngs);
  NoGradGuard no_grad;
  Generator g(1);
  Tensor idx = randint(0, 7, {1, 4}, g);
  Tensor full = lm.forward(idx);
  CausalLMCache cache = lm.make_cache(1);
  lm.forward_cached(narrow(idx, 1, 0, 2), cache);
  nn::KVCache kept = cache.layers[2];
  cache.layers[2].key = cache.layers[2].key.to(kF64);
  EXPECT_KILN_ERROR(lm.forward_cached(narrow(idx, 1, 2, 1), cache), "[MultiheadAttention] cache key [1, 2, 6, 4] f64");
  for (const auto& l : cache.layers) EXPECT_EQ(l.length, 2);
  cache.layers[2] = kept;
  EXPECT_TRUE(all_close(lm.forward_cached(narrow(idx, 1, 2, 2), cache), narrow(full, 1, 2, 2), 1e-5, 1e-6));
  EXPECT_EQ(cache.length(), 4);
}

}  // namespace
}  // namespace kiln::models
