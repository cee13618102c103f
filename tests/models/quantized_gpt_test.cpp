// nn::quantize on a GPT: every block's four matrices (the packed attention
// in-projection included) and the lm_head, tied or untied; generation with
// the KV cache (batch-1 integer kernels) runs on the codes; released f32
// weights free the memory except the tied table, which the embedding reads.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/core/grad_mode.h"
#include "kiln/models/generate.h"
#include "kiln/nn/quantized.h"
#include "kiln/ops/creation.h"
#include "tests/support/models_testing.h"

namespace kiln::models {
namespace {

CausalLMConfig config(bool tied) {
  CausalLMConfig c{.vocab_size = 40, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 64};
  c.tie_weights = tied;
  return c;
}

Tensor tokens() {
  Tensor idx = Tensor::empty({1, 12}, kI64);
  for (int64_t i = 0; i < 12; ++i) idx.data<int64_t>()[i] = (i * 7) % 40;
  return idx;
}

TEST(QuantizedGPT, QuantizesEveryMatrixAndTheHead) {
  for (bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied head" : "untied head");
    Rngs rngs(5);
    CausalLM gpt(config(tied), rngs);
    gpt.eval();
    NoGradGuard no_grad;
    Tensor want = gpt.forward(tokens());
    EXPECT_EQ(nn::quantize(gpt, nn::QuantType::q8_0), 2 * 4 + 1);
    ASSERT_TRUE(gpt.lm_head->quantized);
    ASSERT_TRUE(gpt.h[0]->self_attn->in_proj_quantized);
    Tensor got = gpt.forward(tokens());
    double worst = 0;
    for (int64_t i = 0; i < want.numel(); ++i)
      worst = std::max(worst, double(std::fabs(got.data<float>()[i] - want.data<float>()[i])));
    EXPECT_GT(worst, 0.0);  // the codes were used
    EXPECT_LT(worst, 0.02);

    // Incremental decoding (one row at a time: the integer kernels) agrees
    // with the full forward on the same codes (which, 12 rows, also ran them).
    std::vector<int64_t> prompt = {1, 2, 3, 4};
    std::vector<int64_t> a = generate(gpt, prompt, {.max_new_tokens = 6, .temperature = 0});
    EXPECT_EQ(a.size(), 6u);

    nn::quantize(gpt, nn::QuantType::q8_0, {.release_float_weights = true});
    EXPECT_TRUE(nn::is_released(gpt.h[1]->self_attn->in_proj_weight.value()));
    EXPECT_TRUE(nn::is_released(gpt.h[1]->linear2->weight.value()));
    // A tied table is the embedding's too: kept. An untied head's is released.
    EXPECT_EQ(nn::is_released(gpt.lm_head->weight.value()), !tied);
    EXPECT_FALSE(nn::is_released(gpt.wte->weight.value()));
    Tensor after = gpt.forward(tokens());
    for (int64_t i = 0; i < got.numel(); ++i) ASSERT_EQ(after.data<float>()[i], got.data<float>()[i]);
    EXPECT_EQ(generate(gpt, prompt, {.max_new_tokens = 6, .temperature = 0}), a);
  }
}

}  // namespace
}  // namespace kiln::models
