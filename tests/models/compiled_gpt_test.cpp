// CompiledStep on the char GPT (models::CausalLM, nanoGPT's model at a tiny
// size): 100 recorded-then-replayed AdamW steps give eager's bits.
#include <gtest/gtest.h>

#include <cstring>

#include "kiln/core/parallel.h"
#include "kiln/models/causal_lm.h"
#include "kiln/ops/random.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/clip.h"
#include "kiln/train/compiled_step.h"
#include "tests/support/models_testing.h"

namespace kiln::models {
namespace {

struct TinyGpt {
  TinyGpt()
      : rngs{{"params", 3}},
        lm({.vocab_size = 17, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16}, nn::Init(rngs)),
        opt(lm.parameters(), {.lr = 1e-2, .weight_decay = 0.1}) {}
  std::vector<Tensor> step(const std::vector<Tensor>& in) {
    Tensor loss = lm.loss(in[0], in[1]);
    loss.backward();
    optim::clip_grad_norm_(opt.params(), 1.0);
    opt.step();
    opt.zero_grad();
    return {loss};
  }
  Rngs rngs;
  CausalLM lm;
  optim::AdamW opt;
};

std::vector<Tensor> tokens(int64_t i) {
  Generator gen(77 + uint64_t(i));
  Tensor seq = randint(0, 17, {4, 9}, gen);
  return {seq.narrow(1, 0, 8).contiguous(), seq.narrow(1, 1, 8).contiguous()};
}

uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

TEST(CompiledStepGpt, CharGptAdamWIsBitwiseEagerOver100Steps) {
  set_num_threads(1);  // oneDNN's reductions split by thread: a fixed count for exact bits
  TinyGpt eager, compiled;
  train::CompiledStep step([&](const std::vector<Tensor>& in) { return compiled.step(in); },
                           {.modules = {&compiled.lm}});
  for (int64_t i = 0; i < 100; ++i) {
    float le = eager.step(tokens(i))[0].item<float>();
    float lc = step(tokens(i))[0].item<float>();
    ASSERT_EQ(bits(le), bits(lc)) << "step " << i << "\n" << step.evidence().str();
  }
  EXPECT_EQ(step.recordings(), 1) << step.evidence().str();
  EXPECT_EQ(step.replays(), 99);
  auto pe = eager.lm.named_parameters(), pc = compiled.lm.named_parameters();
  ASSERT_EQ(pe.size(), pc.size());
  for (size_t k = 0; k < pe.size(); ++k)
    EXPECT_EQ(pe[k].second.value().to_vector<float>(), pc[k].second.value().to_vector<float>()) << pe[k].first;
  EXPECT_EQ(compiled.opt.step_count(), 100);
  use_default_threads();
}

}  // namespace
}  // namespace kiln::models
