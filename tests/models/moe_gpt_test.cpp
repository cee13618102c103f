// The MoE GPT (CausalLMConfig::moe_experts, docs/moe.md): its parameters and
// keys, the config's JSON (old configs without the MoE keys still load), the
// aux loss in training-mode loss(), the KV-cache path, and a short training
// run that learns.
#include <cmath>

#include <gtest/gtest.h>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/index.h"
#include "kiln/ops/random.h"
#include "kiln/ops/shape.h"
#include "kiln/optim/adam.h"
#include "tests/support/models_testing.h"

namespace kiln::models {
namespace {

CausalLMConfig tiny_moe() {
  return {.vocab_size = 11, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16, .moe_experts = 4,
          .moe_top_k = 2};
}

TEST(MoEGPT, ParametersKeysAndWidth) {
  Rngs rngs(0);
  CausalLM lm(tiny_moe(), rngs);
  ASSERT_EQ(lm.moe_layers().size(), 2u);
  EXPECT_EQ(lm.moe_layers()[0]->hidden, 32);  // 4 C / k: a token's active FLOPs equal the dense MLP's
  EXPECT_EQ(lm.h[0]->linear1.get(), nullptr);
  const auto keys = testing::state_dict_keys(lm);
  for (const char* k : {"transformer.h.0.moe.router.weight", "transformer.h.0.moe.w1", "transformer.h.0.moe.w2",
                        "transformer.h.1.moe.expert_bias", "transformer.h.0.self_attn.in_proj_weight"})
    EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
  EXPECT_NE(lm.extra_repr().find("moe_experts=4, moe_top_k=2, moe_hidden=32, moe_balance=none"), std::string::npos);
}

TEST(MoEGPT, ConfigJsonRoundTripAndOldConfigs) {
  CausalLMConfig c = tiny_moe();
  c.moe_balance = nn::MoEBalance::bias;
  c.moe_bias_rate = 0.01;
  const CausalLMConfig back = CausalLMConfig::from_json(c.to_json());
  EXPECT_EQ(back.to_json(), c.to_json());
  EXPECT_EQ(back.moe_experts, 4);
  EXPECT_EQ(back.moe_balance, nn::MoEBalance::bias);
  EXPECT_EQ(back.moe_bias_rate, 0.01);
  // A dense config writes no MoE key, and a config without them is dense.
  const std::string dense = CausalLMConfig{}.to_json();
  EXPECT_EQ(dense.find("moe"), std::string::npos);
  EXPECT_EQ(CausalLMConfig::from_json(R"({"vocab_size": 65, "n_layer": 2})").moe_experts, 0);
  EXPECT_KILN_ERROR(CausalLMConfig::from_json(R"({"moe_experts": 4, "moe_top_k": 5})"),
                    "[CausalLM] moe_top_k 5 must be in [1, moe_experts = 4]");
  EXPECT_KILN_ERROR(CausalLMConfig::from_json(R"({"moe_experts": 4, "moe_balance": "loss"})"),
                    "config field 'moe_balance' must be \"none\", \"aux\" or \"bias\"");
  EXPECT_KILN_ERROR(CausalLMConfig::from_json(R"({"moe_experts": 4, "mlp": "relu"})"),
                    "MoE experts are gelu or swiglu MLPs; mlp is relu");
}

TEST(MoEGPT, LossAddsTheAuxLossInTrainingOnly) {
  Rngs rngs(1);
  CausalLMConfig c = tiny_moe();
  c.moe_balance = nn::MoEBalance::aux;
  c.moe_aux_coef = 0.5;
  c.moe_z_coef = 0.01;
  CausalLM lm(c, rngs);
  Generator g(2);
  Tensor idx = randint(0, 11, {3, 8}, g), tgt = randint(0, 11, {3, 8}, g);
  const double with = lm.loss(idx, tgt).item<double>();
  const double aux = lm.aux_loss().item<double>();
  EXPECT_GT(aux, 0.5 * 2 * 0.9);  // two layers, each >= alpha (f . P is smallest when balanced)
  lm.eval();
  const double without = lm.loss(idx, tgt).item<double>();
  EXPECT_NEAR(with - without, aux, 1e-5);
}

TEST(MoEGPT, CachedDecodingMatchesForward) {
  Rngs rngs(3);
  CausalLM lm(tiny_moe(), rngs);
  lm.eval();
  NoGradGuard no_grad;
  Generator g(4);
  Tensor idx = randint(0, 11, {2, 6}, g);
  Tensor full = lm.forward(idx);
  auto cache = lm.make_cache(2);
  Tensor a = lm.forward_cached(narrow(idx, 1, 0, 4), cache);
  Tensor b = lm.forward_cached(narrow(idx, 1, 4, 2), cache);
  EXPECT_TRUE(allclose(cat({a, b}, 1), full, 1e-5, 1e-6));
}

TEST(MoEGPT, LearnsACopyTask) {
  Rngs rngs(5);
  CausalLMConfig c = tiny_moe();
  c.moe_balance = nn::MoEBalance::bias;
  CausalLM lm(c, rngs);
  optim::AdamW opt(lm.parameters(), {.lr = 1e-2});
  // A periodic sequence: each token determines the next.
  std::vector<int64_t> seq;
  for (int i = 0; i < 4 * 9; ++i) seq.push_back((i * 3) % 11);
  Tensor all = tensor<int64_t>(seq, {4, 9});
  Tensor idx = narrow(all, 1, 0, 8).contiguous(), tgt = narrow(all, 1, 1, 8).contiguous();
  double first = 0, last = 0;
  for (int s = 0; s < 60; ++s) {
    Tensor l = lm.loss(idx, tgt);
    if (s == 0) first = l.item<double>();
    last = l.item<double>();
    l.backward();
    opt.step();
    opt.zero_grad();
    for (nn::MoE* m : lm.moe_layers()) m->update_bias();
  }
  EXPECT_NEAR(first, std::log(11.0), 0.2);
  EXPECT_LT(last, 0.3) << "from " << first;
}

}  // namespace
}  // namespace kiln::models
