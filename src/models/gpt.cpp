// GPT: nanoGPT's model on kiln's Embedding, TransformerBlock and LayerNorm;
// the lm_head reuses wte's table (weight tying).
#include "kiln/models/gpt.h"

#include <cmath>

#include <fmt/format.h>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/dropout.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/shape.h"

namespace kiln::models {

namespace {
constexpr const char* kGpt = "GPT";
}  // namespace

// ---- TiedLinear ----

TiedLinear::TiedLinear(const nn::Parameter& w) {
  KILN_CHECK(w.defined() && w.value().dim() == 2, "TiedLinear", "weight must be a defined 2-D parameter");
  weight = register_parameter("weight", w);
}

Tensor TiedLinear::forward(const Tensor& x) const {
  // Mixed precision (docs/mixed_precision.md): input and the tied table in the compute dtype.
  return linear(to_compute(x), to_compute(weight), Tensor());
}

std::string TiedLinear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias=false, tied", weight.value().size(1),
                     weight.value().size(0));
}

// ---- GPT ----

GPT::GPT(const GPTConfig& c, const nn::Init& init) : config(c) {
  KILN_CHECK(c.vocab_size > 0 && c.block_size > 0 && c.n_layer > 0 && c.n_head > 0 && c.n_embd > 0, kGpt,
             "vocab_size {}, block_size {}, n_layer {}, n_head {} and n_embd {} must be positive", c.vocab_size,
             c.block_size, c.n_layer, c.n_head, c.n_embd);
  KILN_CHECK(c.n_embd % c.n_head == 0, kGpt, "n_embd {} is not divisible by n_head {}", c.n_embd, c.n_head);
  KILN_CHECK(c.dropout >= 0 && c.dropout < 1, kGpt, "dropout must be in [0, 1), got {}", c.dropout);
  nn::Init gi = init;  // nanoGPT's _init_weights
  gi.weight = nn::init::normal(0.0, 0.02);
  gi.embedding = nn::init::normal(0.0, 0.02);
  gi.bias = nn::init::zeros();

  transformer = register_module("transformer", nn::ModuleDict());
  wte = transformer->insert("wte", nn::Embedding(c.vocab_size, c.n_embd, gi));
  wpe = transformer->insert("wpe", nn::Embedding(c.block_size, c.n_embd, gi));
  auto blocks = transformer->insert("h", nn::ModuleList());
  const double proj_scale = 1.0 / std::sqrt(2.0 * double(c.n_layer));  // nanoGPT: std 0.02 / sqrt(2 L) for c_proj
  for (int64_t i = 0; i < c.n_layer; ++i) {
    auto block = blocks->push_back(nn::TransformerBlock(c.n_embd, c.n_head, gi,
                                                        {.dropout = c.dropout,
                                                         .activation = nn::TransformerActivation::gelu,
                                                         .causal = true,
                                                         .bias = c.bias,
                                                         .norm_bias = c.bias}));
    NoGradGuard no_grad;  // N(0, 0.02) scaled in place is N(0, 0.02 * proj_scale)
    mul_(block->self_attn->out_proj->weight.value(), proj_scale);
    mul_(block->linear2->weight.value(), proj_scale);
    h.push_back(block);
  }
  ln_f = transformer->insert("ln_f", nn::LayerNorm({c.n_embd}, gi, nn::LayerNormOptions{.bias = c.bias}));
  lm_head = register_module("lm_head", TiedLinear(wte->weight));
}

Tensor GPT::forward(const Tensor& idx) const { return run(idx, nullptr); }
Tensor GPT::forward(const Tensor& idx, Rngs& rngs) const { return run(idx, &rngs); }

Tensor GPT::run(const Tensor& idx, Rngs* rngs) const {
  KILN_CHECK(idx.defined() && idx.dim() == 2, kGpt, "idx {} must be [B, T] token indices",
             idx.defined() ? to_string(idx.shape()) : "undefined");
  const int64_t T = idx.size(1);
  KILN_CHECK(T >= 1 && T <= config.block_size, kGpt, "idx {} has T = {} tokens; block_size is {}",
             to_string(idx.shape()), T, config.block_size);
  const bool drop = is_training() && config.dropout > 0;
  KILN_CHECK(!drop || rngs != nullptr, kGpt,
             "dropout {} in training draws from rngs: call forward(idx, rngs) or eval()", config.dropout);
  Tensor pos = arange(0, T, 1, {.dtype = kI64});
  Tensor x = add(wte->forward(idx), wpe->forward(pos));  // [B, T, C] + [T, C]
  if (drop) {
    Generator gen = rngs->next("dropout");
    x = dropout(x, config.dropout, /*training=*/true, gen);
  }
  for (const auto& block : h) x = rngs ? block->forward(x, *rngs) : block->forward(x);
  return lm_head->forward(ln_f->forward(x));  // [B, T, V]
}

Tensor GPT::loss_of(const Tensor& logits, const Tensor& targets) const {
  KILN_CHECK(targets.defined() && targets.dim() == 2 && targets.size(0) == logits.size(0) &&
                 targets.size(1) == logits.size(1),
             kGpt, "targets {} must be [B, T] = [{}, {}]", targets.defined() ? to_string(targets.shape()) : "undefined",
             logits.size(0), logits.size(1));
  const int64_t BT = logits.size(0) * logits.size(1);
  // Mixed precision: the loss on f32 logits (a bf16 loss would round it to 8 bits).
  const Tensor l = to_precise(logits, wte->weight.dtype());
  return cross_entropy(reshape(l, {BT, config.vocab_size}), reshape(targets, {BT}));
}

Tensor GPT::loss(const Tensor& idx, const Tensor& targets) const { return loss_of(run(idx, nullptr), targets); }
Tensor GPT::loss(const Tensor& idx, const Tensor& targets, Rngs& rngs) const {
  return loss_of(run(idx, &rngs), targets);
}

std::string GPT::extra_repr() const {
  return fmt::format("vocab_size={}, block_size={}, n_layer={}, n_head={}, n_embd={}, dropout={}, bias={}",
                     config.vocab_size, config.block_size, config.n_layer, config.n_head, config.n_embd,
                     config.dropout, config.bias);
}

}  // namespace kiln::models
