// GPT (nanoGPT's model, karpathy/nanoGPT model.py): token + position
// embeddings, n_layer pre-norm causal transformer blocks, a final LayerNorm and
// an lm_head tied to the token embedding. Letters: B batch, T tokens
// (T <= block_size), C = n_embd, V = vocab_size, L = n_layer.
//
//   Rngs rngs(0);
//   models::GPT gpt({.vocab_size = 65, .block_size = 64}, rngs);
//   Tensor logits = gpt.forward(idx);       // idx [B, T] i64 -> [B, T, V]
//   Tensor loss = gpt.loss(idx, targets);   // mean cross-entropy over B * T
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/rngs.h"
#include "kiln/nn/attention.h"
#include "kiln/nn/containers.h"
#include "kiln/nn/embedding.h"
#include "kiln/nn/init.h"
#include "kiln/nn/module.h"
#include "kiln/nn/norm.h"

namespace kiln::models {

/// nanoGPT's GPTConfig; the defaults are its CPU Shakespeare-char config
/// (README: n_layer 4, n_head 4, n_embd 128, block_size 64, no dropout).
struct GPTConfig {
  int64_t vocab_size = 65;
  int64_t block_size = 64;  // the longest T (wpe's rows)
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  double dropout = 0.0;  // embeddings, attention weights, MLP and both residual branches
  bool bias = false;     // biases in every Linear and LayerNorm (nanoGPT: False is a bit better and faster)
};

/// x [..., C] -> x @ weight^T [..., V] with a weight owned elsewhere: the
/// lm_head shares wte's [V, C] table (one Parameter, so one gradient
/// accumulates both uses and the optimizer sees it once).
class TiedLinear : public nn::Module {
 public:
  explicit TiedLinear(const nn::Parameter& weight);
  Tensor forward(const Tensor& x) const;
  std::string extra_repr() const override;

  nn::Parameter weight;  // [V, C], shared
};

/// State-dict keys follow nanoGPT's where kiln's TransformerBlock allows:
/// transformer.wte.weight, transformer.wpe.weight, transformer.h.<i>.{norm1,
/// self_attn.in_proj_weight, self_attn.out_proj, norm2, linear1, linear2}.*,
/// transformer.ln_f.weight, lm_head.weight (the same tensor as wte's). nanoGPT's
/// ln_1 / attn.c_attn / attn.c_proj / ln_2 / mlp.c_fc / mlp.c_proj are norm1 /
/// self_attn.in_proj_weight / self_attn.out_proj / norm2 / linear1 / linear2,
/// with the same [out, in] layouts.
///
/// Initialisation is nanoGPT's whatever `init` says about weights: every Linear
/// weight and both embeddings N(0, 0.02), biases zero, and the residual
/// projections (out_proj, linear2: nanoGPT's c_proj) N(0, 0.02 / sqrt(2 L)).
/// init gives the generators ("params" stream) and the dtype.
class GPT : public nn::Module {
 public:
  GPT(const GPTConfig& config, const nn::Init& init);

  /// idx [B, T] i64 (or i32), T <= block_size, values in [0, V) -> logits [B, T, V].
  /// Dropout must be off (dropout 0 or eval()).
  Tensor forward(const Tensor& idx) const;
  /// Dropout in training draws from rngs.next("dropout").
  Tensor forward(const Tensor& idx, Rngs& rngs) const;
  /// Mean cross-entropy of forward(idx) against targets [B, T] (i64) over the B * T positions.
  Tensor loss(const Tensor& idx, const Tensor& targets) const;
  Tensor loss(const Tensor& idx, const Tensor& targets, Rngs& rngs) const;

  std::string extra_repr() const override;

  GPTConfig config;
  nn::Shared<nn::ModuleDict> transformer;  // wte, wpe, h, ln_f
  nn::Shared<nn::Embedding> wte;           // [V, C]
  nn::Shared<nn::Embedding> wpe;           // [block_size, C]
  std::vector<nn::Shared<nn::TransformerBlock>> h;
  nn::Shared<nn::LayerNorm> ln_f;
  nn::Shared<TiedLinear> lm_head;  // weight is wte->weight

 private:
  Tensor run(const Tensor& idx, Rngs* rngs) const;
  Tensor loss_of(const Tensor& logits, const Tensor& targets) const;
};

}  // namespace kiln::models
