// CausalLM (SPECS G1, spec 002's causal LM): a decoder-only Transformer language
// model. Token (+ optional learned position) embeddings, n_layer pre-norm causal
// blocks (LayerNorm or RMSNorm; fused causal attention, optional rotary q/k;
// GELU or SwiGLU MLP), a final norm and a vocabulary projection, optionally tied
// to the token embedding. The default config is nanoGPT's GPT exactly
// (models::GPT is this class). Letters: B batch, T tokens (T <= block_size),
// C = n_embd, V = vocab_size, L = n_layer, H = n_head, Dh = C / H, F MLP width.
//
//   Rngs rngs(0);
//   models::CausalLM lm({.vocab_size = 65, .block_size = 64}, rngs);
//   Tensor logits = lm.forward(idx);        // idx [B, T] i64 -> [B, T, V]
//   Tensor loss = lm.loss(idx, targets);    // mean cross-entropy over B * T
//   auto cache = lm.make_cache(1);          // incremental decoding (generate.h)
//   Tensor next = lm.forward_cached(prompt, cache);  // [1, Tp, V], then one token at a time
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/rngs.h"
#include "kiln/nn/attention.h"
#include "kiln/nn/containers.h"
#include "kiln/nn/embedding.h"
#include "kiln/nn/init.h"
#include "kiln/nn/module.h"
#include "kiln/nn/moe.h"
#include "kiln/nn/norm.h"
#include "kiln/nn/quantized.h"

namespace kiln::models {

/// The model's shape, a plain struct saved into checkpoints (to_json). The
/// first seven fields are nanoGPT's GPTConfig with its CPU Shakespeare-char
/// values (README: n_layer 4, n_head 4, n_embd 128, block_size 64, no dropout);
/// the defaults of the rest give nanoGPT's GPT. A LLaMA-style model:
///   {.norm = nn::TransformerNorm::rms_norm, .norm_eps = 1e-6, .learned_positions = false,
///    .rotary = true, .mlp = nn::TransformerActivation::swiglu, .tie_weights = false}
struct CausalLMConfig {
  int64_t vocab_size = 65;
  int64_t block_size = 64;  // the longest T (wpe's rows; a KV cache's capacity)
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  double dropout = 0.0;  // embeddings, attention weights, MLP and both residual branches
  bool bias = false;     // biases in every Linear and LayerNorm (nanoGPT: False is a bit better and faster)
  nn::TransformerNorm norm = nn::TransformerNorm::layer_norm;  // the blocks' and the final norm
  double norm_eps = 1e-5;
  bool learned_positions = true;  // wpe [block_size, C] added to the token embedding
  bool rotary = false;            // RoPE on every head's q and k (half-split pairs)
  double rotary_base = 10000;
  nn::TransformerActivation mlp = nn::TransformerActivation::gelu;  // gelu | gelu_tanh | relu | swiglu
  /// F, the MLP's hidden width; 0: 4 C, or with swiglu LLaMA's 2/3 * 4 C
  /// rounded up to a multiple of 64 (C 128 -> 384).
  int64_t mlp_hidden = 0;
  bool tie_weights = true;  // lm_head.weight is wte's table
  /// Mixture-of-experts FFN in every block (nn::MoE, docs/moe.md) instead of
  /// the MLP: moe_experts E > 0 turns it on (mlp gelu or swiglu). Written to
  /// JSON only when on, so dense configs read and write as before.
  int64_t moe_experts = 0;
  int64_t moe_top_k = 2;
  /// Each expert's width; 0: hidden() / moe_top_k, so that a token's active
  /// FLOPs match the dense MLP's (C 128, k 2: 256).
  int64_t moe_hidden = 0;
  bool moe_renormalize = true;
  nn::MoEBalance moe_balance = nn::MoEBalance::none;  // none | aux | bias
  double moe_aux_coef = 0.01;   // alpha, with moe_balance aux
  double moe_z_coef = 0.0;      // beta of the router z-loss (0: off)
  double moe_bias_rate = 1e-3;  // gamma of the aux-loss-free bias update

  /// kiln::Error ([CausalLM] ...) naming the first bad field.
  void validate() const;
  /// F as the blocks build it (mlp_hidden, or its default).
  int64_t hidden() const;
  /// The blocks' nn::MoEOptions (moe_experts > 0).
  nn::MoEOptions moe_options() const;
  /// One JSON object with every field; enums as names ("rms_norm", "swiglu").
  std::string to_json() const;
  /// Parses and validates to_json's form. Absent fields keep their defaults (so
  /// nanoGPT's seven fields alone are a GPT); an unknown field, a wrong type or
  /// a bad value is a kiln::Error naming it.
  static CausalLMConfig from_json(std::string_view json);
};

/// x [..., C] -> x @ weight^T [..., V] with a weight that may be owned
/// elsewhere: a tied lm_head shares wte's [V, C] table (one Parameter, so one
/// gradient accumulates both uses and the optimizer sees it once); an untied
/// one gets its own.
///
/// nn::quantize reaches it (nn::QuantizableWeight): with grad mode off it then
/// multiplies by `quantized`, a copy of the table (tied, the f32 table stays
/// for the embedding's lookups).
class TiedLinear : public nn::Module, public nn::QuantizableWeight {
 public:
  explicit TiedLinear(const nn::Parameter& weight);
  Tensor forward(const Tensor& x) const;
  std::string extra_repr() const override;

  const nn::Parameter& quantizable_weight() const override { return weight; }
  std::shared_ptr<const nn::QuantizedTensor>& quantized_weight() override { return quantized; }

  nn::Parameter weight;  // [V, C], shared when tied
  std::shared_ptr<const nn::QuantizedTensor> quantized;
};

/// Every block's KV cache for incremental decoding (make_cache; generate.h).
struct CausalLMCache {
  std::vector<nn::KVCache> layers;  // one per block: key, value [B, H, block_size, Dh]
  int64_t length() const { return layers.empty() ? 0 : layers.front().length; }  // positions filled
  int64_t capacity() const { return layers.empty() ? 0 : layers.front().capacity(); }
  int64_t batch() const { return layers.empty() ? 0 : layers.front().key.size(0); }
  void clear() {
    for (auto& l : layers) l.length = 0;
  }
};

/// State-dict keys follow nanoGPT's where kiln's TransformerBlock allows:
/// transformer.wte.weight, transformer.wpe.weight (with learned_positions),
/// transformer.h.<i>.{norm1, self_attn.in_proj_weight, self_attn.out_proj,
/// norm2, linear1, linear2}.*, transformer.ln_f.weight, lm_head.weight (the
/// same tensor as wte's when tied). nanoGPT's ln_1 / attn.c_attn / attn.c_proj
/// / ln_2 / mlp.c_fc / mlp.c_proj are norm1 / self_attn.in_proj_weight /
/// self_attn.out_proj / norm2 / linear1 / linear2, with the same [out, in]
/// layouts. With swiglu, linear1.weight is [2F, C]: LLaMA's w1 (gate) rows,
/// then w3 (up); linear2 is w2.
///
/// Initialisation is nanoGPT's whatever `init` says about weights: every Linear
/// weight (an untied lm_head too) and both embeddings N(0, 0.02), biases zero,
/// norms one, and the residual projections (out_proj, linear2: nanoGPT's
/// c_proj) N(0, 0.02 / sqrt(2 L)). init gives the generators ("params" stream)
/// and the dtype.
class CausalLM : public nn::Module {
 public:
  CausalLM(const CausalLMConfig& config, const nn::Init& init);

  /// idx [B, T] i64 (or i32), T <= block_size, values in [0, V) -> logits [B, T, V].
  /// Dropout must be off (dropout 0 or eval()).
  Tensor forward(const Tensor& idx) const;
  /// Dropout in training draws from rngs.next("dropout").
  Tensor forward(const Tensor& idx, Rngs& rngs) const;
  /// forward(idx) as [B * T, V]: row b * T + t predicts token t + 1 of sequence b.
  Tensor logits(const Tensor& idx) const;
  /// Mean cross-entropy of forward(idx) against targets [B, T] (i64) over the B * T positions.
  Tensor loss(const Tensor& idx, const Tensor& targets) const;
  Tensor loss(const Tensor& idx, const Tensor& targets, Rngs& rngs) const;

  /// An empty cache for `batch` sequences of up to block_size tokens.
  CausalLMCache make_cache(int64_t batch) const;
  /// Continues the cached sequences: idx_new [B, Tn] are positions length ..
  /// length + Tn - 1 (length + Tn <= block_size) -> logits [B, Tn, V], the
  /// same as forward's last Tn rows on the whole sequence. Appends to the
  /// cache. Inference only: grad mode off (NoGradGuard) and dropout off.
  Tensor forward_cached(const Tensor& idx_new, CausalLMCache& cache) const;

  std::string extra_repr() const override;

  /// The MoE layers, one per block (empty for a dense model).
  std::vector<nn::MoE*> moe_layers() const;
  /// Sum of the MoE layers' balancing losses of the latest forward (an
  /// untracked 0 for a dense model or with them off). loss() adds it in
  /// training mode; in eval mode loss() is the cross-entropy alone.
  Tensor aux_loss() const;

  CausalLMConfig config;
  nn::Shared<nn::ModuleDict> transformer;  // wte, wpe, h, ln_f
  nn::Shared<nn::Embedding> wte;           // [V, C]
  nn::Shared<nn::Embedding> wpe;           // [block_size, C]; null without learned_positions
  std::vector<nn::Shared<nn::TransformerBlock>> h;
  nn::Shared<nn::LayerNorm> ln_f;  // null with rms_norm
  nn::Shared<nn::RMSNorm> rms_f;   // "transformer.ln_f" with rms_norm, else null
  nn::Shared<TiedLinear> lm_head;  // weight is wte->weight when tied

 private:
  Tensor run(const Tensor& idx, Rngs* rngs, CausalLMCache* cache) const;
  Tensor loss_of(const Tensor& logits, const Tensor& targets) const;
};

}  // namespace kiln::models
