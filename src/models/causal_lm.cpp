// CausalLM: embeddings, kiln's TransformerBlocks, a final norm and the (tied or
// own) vocabulary projection. Its config: src/models/causal_lm_config.cpp.
#include "kiln/models/causal_lm.h"

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
#include "src/models/causal_lm_names.h"

namespace kiln::models {

namespace {
constexpr const char* kLm = "CausalLM";
}  // namespace

// ---- TiedLinear ----

TiedLinear::TiedLinear(const nn::Parameter& w) {
  KILN_CHECK(w.defined() && w.value().dim() == 2, "TiedLinear", "weight must be a defined 2-D parameter");
  weight = register_parameter("weight", w);
}

Tensor TiedLinear::forward(const Tensor& x) const {
  if (quantized && !GradMode::is_enabled()) return to_compute(nn::quantized_linear(x, *quantized));
  KILN_CHECK(!nn::is_released(weight), "TiedLinear",
             "weight was released for quantized inference (QuantizeOptions::release_float_weights): a forward "
             "needs grad mode off");
  // Mixed precision (docs/mixed_precision.md): input and the tied table in the compute dtype.
  return linear(to_compute(x), to_compute(weight), Tensor());
}

std::string TiedLinear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias=false", weight.value().size(1), weight.value().size(0));
}

// ---- CausalLM ----

CausalLM::CausalLM(const CausalLMConfig& c, const nn::Init& init) : config(c) {
  c.validate();
  nn::Init gi = init;  // nanoGPT's _init_weights
  gi.weight = nn::init::normal(0.0, 0.02);
  gi.embedding = nn::init::normal(0.0, 0.02);
  gi.bias = nn::init::zeros();

  transformer = register_module("transformer", nn::ModuleDict());
  wte = transformer->insert("wte", nn::Embedding(c.vocab_size, c.n_embd, gi));
  if (c.learned_positions) wpe = transformer->insert("wpe", nn::Embedding(c.block_size, c.n_embd, gi));
  auto blocks = transformer->insert("h", nn::ModuleList());
  const double proj_scale = 1.0 / std::sqrt(2.0 * double(c.n_layer));  // nanoGPT: std 0.02 / sqrt(2 L) for c_proj
  for (int64_t i = 0; i < c.n_layer; ++i) {
    auto block = blocks->push_back(nn::TransformerBlock(c.n_embd, c.n_head, gi,
                                                        {.dim_feedforward = c.hidden(),
                                                         .dropout = c.dropout,
                                                         .activation = c.mlp,
                                                         .norm_eps = c.norm_eps,
                                                         .norm = c.norm,
                                                         .rotary = c.rotary,
                                                         .rotary_base = c.rotary_base,
                                                         .causal = true,
                                                         .bias = c.bias,
                                                         .norm_bias = c.bias,
                                                         .moe = c.moe_experts > 0
                                                                    ? std::optional<nn::MoEOptions>(c.moe_options())
                                                                    : std::nullopt}));
    NoGradGuard no_grad;  // N(0, 0.02) scaled in place is N(0, 0.02 * proj_scale)
    mul_(block->self_attn->out_proj->weight.value(), proj_scale);
    // The experts' output projections are the MoE's c_proj.
    mul_(block->moe ? block->moe->w2.value() : block->linear2->weight.value(), proj_scale);
    h.push_back(block);
  }
  if (c.norm == nn::TransformerNorm::rms_norm) {
    rms_f = transformer->insert("ln_f", nn::RMSNorm({c.n_embd}, gi, c.norm_eps));
  } else {
    ln_f = transformer->insert("ln_f", nn::LayerNorm({c.n_embd}, gi, {.eps = c.norm_eps, .bias = c.bias}));
  }
  const nn::Parameter head = c.tie_weights ? wte->weight : gi.make_weight({c.vocab_size, c.n_embd}, {c.n_embd, c.vocab_size});
  lm_head = register_module("lm_head", TiedLinear(head));
}

Tensor CausalLM::forward(const Tensor& idx) const { return run(idx, nullptr, nullptr); }
Tensor CausalLM::forward(const Tensor& idx, Rngs& rngs) const { return run(idx, &rngs, nullptr); }

Tensor CausalLM::logits(const Tensor& idx) const {
  Tensor l = run(idx, nullptr, nullptr);
  return reshape(l, {l.size(0) * l.size(1), config.vocab_size});
}

CausalLMCache CausalLM::make_cache(int64_t batch) const {
  KILN_CHECK(batch > 0, kLm, "make_cache: batch must be positive, got {}", batch);
  CausalLMCache cache;
  for (const auto& block : h) cache.layers.push_back(block->self_attn->make_cache(batch, config.block_size));
  return cache;
}

Tensor CausalLM::forward_cached(const Tensor& idx_new, CausalLMCache& cache) const {
  KILN_CHECK(!GradMode::is_enabled(), kLm, "forward_cached is for inference: run it under NoGradGuard");
  KILN_CHECK(!(is_training() && config.dropout > 0), kLm, "forward_cached needs dropout off: call eval()");
  KILN_CHECK(cache.layers.size() == h.size(), kLm, "the cache has {} layers; the model has n_layer {}",
             cache.layers.size(), h.size());
  return run(idx_new, nullptr, &cache);
}

Tensor CausalLM::run(const Tensor& idx, Rngs* rngs, CausalLMCache* cache) const {
  KILN_CHECK(idx.defined() && idx.dim() == 2, kLm, "idx {} must be [B, T] token indices",
             idx.defined() ? to_string(idx.shape()) : "undefined");
  const int64_t T = idx.size(1);
  const int64_t start = cache ? cache->length() : 0;  // position of idx's first column
  if (cache) {
    KILN_CHECK(idx.size(0) == cache->batch(), kLm, "idx {} has B = {}; the cache is for batch {}",
               to_string(idx.shape()), idx.size(0), cache->batch());
    KILN_CHECK(T >= 1 && start + T <= config.block_size, kLm,
               "idx {} adds T = {} tokens to a cache holding {}; block_size is {}", to_string(idx.shape()), T, start,
               config.block_size);
  } else {
    KILN_CHECK(T >= 1 && T <= config.block_size, kLm, "idx {} has T = {} tokens; block_size is {}",
               to_string(idx.shape()), T, config.block_size);
  }
  const bool drop = is_training() && config.dropout > 0;
  KILN_CHECK(!drop || rngs != nullptr, kLm,
             "dropout {} in training draws from rngs: call forward(idx, rngs) or eval()", config.dropout);
  Tensor x = wte->forward(idx);  // [B, T, C]
  if (wpe) x = add(x, wpe->forward(arange(start, start + T, 1, {.dtype = kI64})));  // + [T, C]
  if (drop) {
    Generator gen = rngs->next("dropout");
    x = dropout(x, config.dropout, /*training=*/true, gen);
  }
  try {
    for (size_t i = 0; i < h.size(); ++i) {
      const nn::BlockCall call{.cache = cache ? &cache->layers[i] : nullptr};
      x = rngs ? h[i]->forward(x, *rngs, call) : h[i]->forward(x, call);
    }
  } catch (...) {
    // The layers before the one that threw have grown their caches: roll them
    // back so that the cache stays one consistent length.
    if (cache)
      for (auto& l : cache->layers) l.length = start;
    throw;
  }
  return lm_head->forward(rms_f ? rms_f->forward(x) : ln_f->forward(x));  // [B, T, V]
}

Tensor CausalLM::loss_of(const Tensor& logits, const Tensor& targets) const {
  KILN_CHECK(targets.defined() && targets.dim() == 2 && targets.size(0) == logits.size(0) &&
                 targets.size(1) == logits.size(1),
             kLm, "targets {} must be [B, T] = [{}, {}]", targets.defined() ? to_string(targets.shape()) : "undefined",
             logits.size(0), logits.size(1));
  const int64_t BT = logits.size(0) * logits.size(1);
  // Mixed precision: the loss on f32 logits (a bf16 loss would round it to 8 bits).
  const Tensor l = to_precise(logits, wte->weight.dtype());
  return cross_entropy(reshape(l, {BT, config.vocab_size}), reshape(targets, {BT}));
}

Tensor CausalLM::loss(const Tensor& idx, const Tensor& targets) const {
  Tensor l = loss_of(run(idx, nullptr, nullptr), targets);
  return config.moe_experts > 0 && is_training() ? add(l, aux_loss()) : l;
}
Tensor CausalLM::loss(const Tensor& idx, const Tensor& targets, Rngs& rngs) const {
  Tensor l = loss_of(run(idx, &rngs, nullptr), targets);
  return config.moe_experts > 0 && is_training() ? add(l, aux_loss()) : l;
}

std::vector<nn::MoE*> CausalLM::moe_layers() const {
  std::vector<nn::MoE*> out;
  for (const auto& block : h)
    if (block->moe) out.push_back(block->moe.get());
  return out;
}

Tensor CausalLM::aux_loss() const {
  Tensor total;
  for (nn::MoE* m : moe_layers()) {
    const Tensor a = m->aux_loss();
    if (!a.requires_grad() && a.item<double>() == 0.0) continue;  // off: adds nothing
    total = total.defined() ? add(total, to_precise(a, wte->weight.dtype())) : to_precise(a, wte->weight.dtype());
  }
  return total.defined() ? total : zeros({}, {.dtype = wte->weight.dtype(), .device = wte->weight.value().device()});
}

std::string CausalLM::extra_repr() const {
  const CausalLMConfig& c = config;
  std::string s = fmt::format("vocab_size={}, block_size={}, n_layer={}, n_head={}, n_embd={}, dropout={}, bias={}",
                              c.vocab_size, c.block_size, c.n_layer, c.n_head, c.n_embd, c.dropout, c.bias);
  if (c.norm != nn::TransformerNorm::layer_norm) s += fmt::format(", norm={}", detail::norm_name(c.norm));
  if (!c.learned_positions) s += ", learned_positions=false";
  if (c.rotary) s += ", rotary=true";
  if (c.mlp != nn::TransformerActivation::gelu) s += fmt::format(", mlp={}, mlp_hidden={}", detail::mlp_name(c.mlp), c.hidden());
  if (!c.tie_weights) s += ", tie_weights=false";
  if (c.moe_experts > 0)
    s += fmt::format(", moe_experts={}, moe_top_k={}, moe_hidden={}, moe_balance={}", c.moe_experts, c.moe_top_k,
                     c.moe_options().expert_hidden, detail::moe_balance_name(c.moe_balance));
  return s;
}

}  // namespace kiln::models
