// GPT (nanoGPT's model, karpathy/nanoGPT model.py): CausalLM with its default
// config (learned positions, LayerNorm, GELU 4C MLP, lm_head tied to wte).
// One model, one place: GPT and GPTConfig are CausalLM and CausalLMConfig.
//
//   Rngs rngs(0);
//   models::GPT gpt({.vocab_size = 65, .block_size = 64}, rngs);
//   Tensor logits = gpt.forward(idx);       // idx [B, T] i64 -> [B, T, V]
//   Tensor loss = gpt.loss(idx, targets);   // mean cross-entropy over B * T
#pragma once

#include "kiln/models/causal_lm.h"

namespace kiln::models {

using GPTConfig = CausalLMConfig;
using GPT = CausalLM;

}  // namespace kiln::models
