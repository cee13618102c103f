// models::GPT (nanoGPT's model): parameter count and keys, weight tying, the
// causal property, the loss at initialisation, and consistency between the
// model and the same computation spelled out with kiln ops.
#include <cmath>

#include <gtest/gtest.h>

#include "kiln/core/grad_mode.h"
#include "kiln/models/gpt.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/index.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/random.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "kiln/optim/adam.h"
#include "tests/support/models_testing.h"

namespace kiln::models {
namespace {

TEST(GPT, ParameterCountAndKeys) {
  // nanoGPT's CPU Shakespeare-char config without bias: V = 65, T = 64, C = 128, L = 4.
  //   wte 65 * 128 = 8320, wpe 64 * 128 = 8192, ln_f 128,
  //   per block: ln_1 128 + c_attn 3 * 128 * 128 = 49152 + c_proj 128 * 128 = 16384
  //              + ln_2 128 + c_fc 128 * 512 = 65536 + mlp c_proj 512 * 128 = 65536 = 196864,
  //   lm_head: tied to wte, counted once.
  //   8320 + 8192 + 4 * 196864 + 128 = 804096 (nanoGPT prints 0.80M: 795904 without wpe).
  Rngs rngs(0);
  GPT gpt({}, rngs);
  EXPECT_EQ(gpt.num_parameters(), 804096);
  EXPECT_EQ(gpt.parameters().size(), 2u + 4u * 6u + 1u);  // lm_head.weight is wte's
  std::vector<std::string> k = testing::state_dict_keys(gpt);
  EXPECT_EQ(k.front(), "transformer.wte.weight");
  EXPECT_EQ(k[1], "transformer.wpe.weight");
  EXPECT_EQ(k[2], "transformer.h.0.self_attn.in_proj_weight");
  EXPECT_EQ(k.back(), "lm_head.weight");
  EXPECT_EQ(k[k.size() - 2], "transformer.ln_f.weight");
  for (const auto& key : k) EXPECT_EQ(key.find("bias"), std::string::npos) << key;
  EXPECT_EQ(k.size(), 2u + 4u * 6u + 2u);

  // With bias: every Linear and LayerNorm gets one (nanoGPT's bias=True).
  GPT biased({.bias = true}, rngs);
  EXPECT_EQ(biased.num_parameters(), 804096 + 4 * (128 + 3 * 128 + 128 + 128 + 512 + 128) + 128);
}

TEST(GPT, InitIsNanoGPTs) {
  Rngs rngs(0);
  GPT gpt({}, rngs);
  auto stddev = [](const Tensor& t) { return std::sqrt(mean(mul(t, t)).item<double>()); };
  EXPECT_NEAR(stddev(gpt.wte->weight), 0.02, 0.002);
  EXPECT_NEAR(stddev(gpt.h[0]->linear1->weight), 0.02, 0.002);
  EXPECT_NEAR(stddev(gpt.h[0]->self_attn->in_proj_weight), 0.02, 0.002);
  const double proj = 0.02 / std::sqrt(8.0);
  EXPECT_NEAR(stddev(gpt.h[0]->linear2->weight), proj, proj * 0.1);
  EXPECT_NEAR(stddev(gpt.h[3]->self_attn->out_proj->weight), proj, proj * 0.1);
  EXPECT_TRUE(allclose(gpt.ln_f->weight, ones({128})));
}

TEST(GPT, LossAtInitIsLnV) {
  Rngs rngs(0);
  GPT gpt({}, rngs);
  Generator g(1);
  Tensor idx = randint(0, 65, {12, 64}, g), targets = randint(0, 65, {12, 64}, g);
  Tensor logits = gpt.forward(idx);
  EXPECT_EQ(logits.shape(), (Shape{12, 64, 65}));
  EXPECT_NEAR(gpt.loss(idx, targets).item<double>(), std::log(65.0), 0.1);
}

TEST(GPT, Causal) {
  Rngs rngs(0);
  GPT gpt({.vocab_size = 11, .block_size = 9, .n_layer = 2, .n_head = 2, .n_embd = 16}, rngs);
  Generator g(2);
  Tensor idx = randint(0, 11, {2, 9}, g);
  Tensor before = gpt.forward(idx);
  for (int64_t t = 0; t + 1 < 9; ++t) {
    Tensor changed = idx.clone();
    {
      NoGradGuard ng;
      Tensor col = narrow(changed, 1, t + 1, 1);
      fill_(col, (idx.select(1, t + 1).select(0, 0).item<int64_t>() + 1) % 11);
    }
    Tensor after = gpt.forward(changed);
    // Positions <= t see only tokens <= t: unchanged (bit for bit: the same rows are computed the same way).
    EXPECT_TRUE(allclose(narrow(after, 1, 0, t + 1), narrow(before, 1, 0, t + 1), 1e-5, 1e-6)) << "t " << t;
    EXPECT_FALSE(allclose(narrow(after, 1, t + 1, 1), narrow(before, 1, t + 1, 1), 1e-5, 1e-6)) << "t " << t;
  }
  // A prefix on its own gives the prefix's logits.
  EXPECT_TRUE(allclose(gpt.forward(narrow(idx, 1, 0, 5)), narrow(before, 1, 0, 5), 1e-5, 1e-6));
}

// The tied table gets one gradient: the sum of what the embedding lookup and
// the lm_head would each receive if they had separate copies.
TEST(GPT, TiedWeightAccumulatesBothUses) {
  Rngs rngs(0);
  GPT gpt({.vocab_size = 13, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16}, rngs);
  EXPECT_TRUE(gpt.lm_head->weight.value().is_same(gpt.wte->weight.value()));
  Generator g(3);
  Tensor idx = randint(0, 13, {3, 8}, g), targets = randint(0, 13, {3, 8}, g);
  gpt.loss(idx, targets).backward();
  Tensor tied_grad = gpt.wte->weight.grad().clone();
  gpt.zero_grad();

  // The same forward with two separate copies of the table.
  Tensor w_in = gpt.wte->weight.value().detach().clone().requires_grad_();
  Tensor w_out = gpt.wte->weight.value().detach().clone().requires_grad_();
  Tensor x = add(embedding(w_in, idx), gpt.wpe->forward(arange(0, 8, 1, {.dtype = kI64})));
  for (const auto& block : gpt.h) x = block->forward(x);
  Tensor logits = linear(gpt.ln_f->forward(x), w_out, Tensor());  // [3, 8, 13]
  Tensor loss = cross_entropy(reshape(logits, {24, 13}), reshape(targets, {24}));
  EXPECT_NEAR(loss.item<double>(), gpt.loss(idx, targets).item<double>(), 1e-6);
  gpt.zero_grad();
  loss.backward();
  EXPECT_TRUE(allclose(tied_grad, add(w_in.grad(), w_out.grad()), 1e-4, 1e-6));
  EXPECT_GT(max(abs(w_in.grad())).item<double>(), 0.0);
  EXPECT_GT(max(abs(w_out.grad())).item<double>(), 0.0);
}

// A few AdamW steps on one batch lower its loss; the state dict round-trips
// into a model drawn from another seed (the tied key loads once, into one tensor).
TEST(GPT, TrainsAndRoundTrips) {
  Rngs rngs(0);
  GPTConfig cfg{.vocab_size = 17, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 32};
  GPT gpt(cfg, rngs);
  Generator g(4);
  Tensor idx = randint(0, 17, {4, 16}, g), targets = randint(0, 17, {4, 16}, g);
  optim::AdamW opt(gpt.parameters(), {.lr = 1e-2, .beta2 = 0.99, .weight_decay = 0.1});
  const double first = gpt.loss(idx, targets).item<double>();
  for (int i = 0; i < 10; ++i) {
    gpt.loss(idx, targets).backward();
    opt.step();
    opt.zero_grad();
  }
  EXPECT_LT(gpt.loss(idx, targets).item<double>(), first - 0.5);
  EXPECT_TRUE(gpt.lm_head->weight.value().is_same(gpt.wte->weight.value()));

  Rngs other(7);
  GPT copy(cfg, other);
  EXPECT_FALSE(allclose(copy.forward(idx), gpt.forward(idx)));
  copy.load_state_dict(gpt.state_dict());
  EXPECT_TRUE(allclose(copy.forward(idx), gpt.forward(idx), 1e-6, 1e-7));
  EXPECT_TRUE(copy.lm_head->weight.value().is_same(copy.wte->weight.value()));
}

// PyTorch golden (tools/goldens/gpt.py: nanoGPT written out in f64): the same
// weights give the same logits, loss and gradients (the tied table's is the sum
// of both uses), and AdamW with nanoGPT's decay groups gives the same losses.
TEST(GPT, MatchesPyTorchNanoGPT) {
  using testing::all_close;
  using testing::golden_tensor;
  const auto& j = testing::golden("models_gpt");
  const auto& c = j.at("config");
  Rngs rngs(0);
  GPT gpt({.vocab_size = c.at("vocab_size").get<int64_t>(),
           .block_size = c.at("block_size").get<int64_t>(),
           .n_layer = c.at("n_layer").get<int64_t>(),
           .n_head = c.at("n_head").get<int64_t>(),
           .n_embd = c.at("n_embd").get<int64_t>()},
          rngs);
  gpt.to(kF64);
  nn::StateDict state;
  for (const auto& [k, v] : j.at("state").items()) state.insert(k, golden_tensor(v));
  gpt.load_state_dict(state);
  Tensor idx = golden_tensor(j.at("idx")), targets = golden_tensor(j.at("targets"));
  EXPECT_TRUE(all_close(gpt.forward(idx), golden_tensor(j.at("logits")), 1e-10, 1e-12));
  Tensor loss = gpt.loss(idx, targets);
  EXPECT_NEAR(loss.item<double>(), j.at("loss").get<double>(), 1e-12);
  loss.backward();
  for (const auto& [name, p] : gpt.named_parameters()) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(all_close(p.grad(), golden_tensor(j.at("grads").at(name)), 1e-8, 1e-12));
  }
  gpt.zero_grad();
  optim::AdamW opt(gpt.parameters(), {.lr = 1e-2, .beta2 = 0.99, .weight_decay = 0.1});
  for (const auto& expected : j.at("adamw_losses")) {
    Tensor l = gpt.loss(idx, targets);
    l.backward();
    opt.step();
    opt.zero_grad();
    EXPECT_NEAR(l.item<double>(), expected.get<double>(), 1e-10);
  }
}

TEST(GPT, Errors) {
  Rngs rngs(0);
  EXPECT_KILN_ERROR(GPT({.n_head = 3}, rngs), "[CausalLM] n_embd 128 is not divisible by n_head 3");
  EXPECT_KILN_ERROR(GPT({.dropout = 1.0}, rngs), "[CausalLM] dropout must be in [0, 1), got 1");
  GPT gpt({.vocab_size = 5, .block_size = 4, .n_layer = 1, .n_head = 1, .n_embd = 8}, rngs);
  EXPECT_KILN_ERROR(gpt.forward(zeros({2, 5}, {.dtype = kI64})), "[CausalLM] idx [2, 5] has T = 5 tokens; block_size is 4");
  EXPECT_KILN_ERROR(gpt.forward(zeros({8}, {.dtype = kI64})), "[CausalLM] idx [8] must be [B, T] token indices");
  EXPECT_KILN_ERROR(gpt.loss(zeros({2, 4}, {.dtype = kI64}), zeros({2, 3}, {.dtype = kI64})),
                    "[CausalLM] targets [2, 3] must be [B, T] = [2, 4]");
  GPT dropping({.vocab_size = 5, .block_size = 4, .n_layer = 1, .n_head = 1, .n_embd = 8, .dropout = 0.1}, rngs);
  EXPECT_KILN_ERROR(dropping.forward(zeros({2, 4}, {.dtype = kI64})), "draws from rngs");
  Rngs drops{{"dropout", 1}};
  EXPECT_EQ(dropping.forward(zeros({2, 4}, {.dtype = kI64}), drops).shape(), (Shape{2, 4, 5}));
  dropping.eval();
  EXPECT_EQ(dropping.forward(zeros({2, 4}, {.dtype = kI64})).shape(), (Shape{2, 4, 5}));
}

}  // namespace
}  // namespace kiln::models
