// MultiheadAttention and TransformerBlock (SPECS L14, L17): projections,
// head split/merge, masks checked against [B, H, Tq, Tk], fully masked rows
// zeroed after out_proj, attention/residual dropout, AdaLN-Zero modulation.
// Legend: B batch, Tq queries, Tk keys, D width, H heads, Dh = D / H, F mlp width.
#include "kiln/nn/attention.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/nn/quantized.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/dropout.h"
#include "kiln/ops/index.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/rotary.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"

namespace kiln::nn {

namespace {

constexpr const char* kMha = "MultiheadAttention";
constexpr const char* kBlock = "TransformerBlock";

const char* policy_name(AttentionBackend p) {
  switch (p) {
    case AttentionBackend::Auto: return "Auto";
    case AttentionBackend::Standard: return "Standard";
    case AttentionBackend::Flash: return "Flash";
  }
  return "?";
}

// Whether m broadcasts to full ([B, H, Tq, Tk]).
bool broadcasts_to(const Tensor& m, const Shape& full) {
  bool ok = m.dim() <= 4;
  for (int64_t i = 0; ok && i < m.dim(); ++i) {
    const int64_t have = m.size(m.dim() - 1 - i), want = full[size_t(3 - i)];
    ok = have == want || have == 1;
  }
  return ok;
}

// [b, Tq, 1] bool, true where a query row allows no key in any head, or
// undefined when no row is fully masked. `allowed` broadcasts to [B, H, Tq, Tk].
Tensor dead_rows(Tensor allowed, int64_t Tq) {
  if (!allowed.defined()) return {};
  while (allowed.dim() < 4) allowed = unsqueeze(allowed, 0);
  Tensor alive = any(any(allowed, -1), 1);  // [b, tq]: some head sees some key
  if (alive.size(1) != Tq) alive = expand(alive, {alive.size(0), Tq});
  Tensor dead = logical_not(alive);
  if (!any(dead).item<bool>()) return {};
  return unsqueeze(dead, -1);
}

// [B, T, H * Dh] -> [B, H, T, Dh] (a view when the strides allow).
Tensor split_heads(const Tensor& t, int64_t H) {
  const int64_t B = t.size(0), T = t.size(1), Dh = t.size(2) / H;
  return transpose(reshape(t, {B, T, H, Dh}), 1, 2);
}

Tensor maybe_narrow(const Tensor& t, int64_t start, int64_t length) {
  return t.defined() ? narrow(t, 0, start, length) : Tensor();
}

}  // namespace

// ---- MultiheadAttention ----

MultiheadAttention::MultiheadAttention(int64_t D, int64_t H, const Init& init, const MultiheadAttentionOptions& o)
    : embed_dim(D),
      num_heads(H),
      head_dim(H > 0 ? D / H : 0),
      kdim(o.kdim.value_or(D)),
      vdim(o.vdim.value_or(D)),
      dropout(o.dropout),
      policy(o.policy),
      rotary(o.rotary),
      rotary_base(o.rotary_base) {
  KILN_CHECK(D > 0 && H > 0, kMha, "embed_dim {} and num_heads {} must be positive", D, H);
  KILN_CHECK(D % H == 0, kMha, "embed_dim {} is not divisible by num_heads {}", D, H);
  KILN_CHECK(kdim > 0 && vdim > 0, kMha, "kdim {} and vdim {} must be positive", kdim, vdim);
  KILN_CHECK(!rotary || (head_dim % 2 == 0 && rotary_base > 0), kMha,
             "rotary needs an even head_dim and a positive base, got head_dim {} and base {}", head_dim, rotary_base);
  KILN_CHECK(dropout >= 0 && dropout <= 1, kMha, "dropout must be in [0, 1], got {}", dropout);
  KILN_CHECK(!(dropout > 0 && policy == AttentionBackend::Flash), kMha,
             "dropout {} on the attention weights needs them materialised: use policy Auto or Standard, not Flash",
             dropout);
  // Each projection is a [D, in] linear map: fan_in = in.
  if (kdim == D && vdim == D) {
    in_proj_weight = register_parameter("in_proj_weight", init.make_weight({3 * D, D}, {D, D}));
  } else {
    q_proj_weight = register_parameter("q_proj_weight", init.make_weight({D, D}, {D, D}));
    k_proj_weight = register_parameter("k_proj_weight", init.make_weight({D, kdim}, {kdim, D}));
    v_proj_weight = register_parameter("v_proj_weight", init.make_weight({D, vdim}, {vdim, D}));
  }
  if (o.bias) in_proj_bias = register_parameter("in_proj_bias", init.make_bias({3 * D}, {D, D}));
  out_proj = register_module("out_proj", Linear(D, D, init, o.bias));
}

AttentionOutput MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                            const AttentionCall& call) const {
  return run(query, key, value, nullptr, call);
}

AttentionOutput MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value, Rngs& rngs,
                                            const AttentionCall& call) const {
  return run(query, key, value, &rngs, call);
}

AttentionOutput MultiheadAttention::run(const Tensor& query_in, const Tensor& key_in, const Tensor& value_in,
                                        Rngs* rngs, const AttentionCall& call) const {
  // Mixed precision (docs/mixed_precision.md): inputs and projections in the compute dtype. Casting one
  // tensor once keeps self-attention's query, key and value the same tensor (one GEMM).
  const Tensor query = to_compute(query_in);
  const Tensor key = key_in.is_same(query_in) ? query : to_compute(key_in);
  const Tensor value = value_in.is_same(query_in) ? query : value_in.is_same(key_in) ? key : to_compute(value_in);
  // ---- checks: shapes, dtypes, masks, randomness ----
  KILN_CHECK(query.defined() && key.defined() && value.defined(), kMha, "query, key and value must be defined");
  KILN_CHECK(query.dim() == 3 && key.dim() == 3 && value.dim() == 3, kMha,
             "query, key and value must be 3-D [B, T, features], got query {}, key {} and value {}",
             to_string(query.shape()), to_string(key.shape()), to_string(value.shape()));
  const int64_t B = query.size(0), Tq = query.size(1), Tk = key.size(1), D = embed_dim, H = num_heads;
  KILN_CHECK(query.size(2) == D, kMha, "query {} has {} features, expected embed_dim {}", to_string(query.shape()),
             query.size(2), D);
  KILN_CHECK(key.size(2) == kdim, kMha, "key {} has {} features, expected kdim {}", to_string(key.shape()),
             key.size(2), kdim);
  KILN_CHECK(value.size(2) == vdim, kMha, "value {} has {} features, expected vdim {}", to_string(value.shape()),
             value.size(2), vdim);
  KILN_CHECK(key.size(0) == B && value.size(0) == B, kMha, "batch sizes differ: query {}, key {} and value {}",
             to_string(query.shape()), to_string(key.shape()), to_string(value.shape()));
  KILN_CHECK(value.size(1) == Tk, kMha, "key {} and value {} differ in length (Tk {} vs {})", to_string(key.shape()),
             to_string(value.shape()), Tk, value.size(1));
  const DType dt = compute_dtype().value_or(out_proj->weight.dtype());
  KILN_CHECK(query.dtype() == dt && key.dtype() == dt && value.dtype() == dt, kMha,
             "query {} {}, key {} {} and value {} {} must have the layer's dtype {}", to_string(query.shape()),
             name(query.dtype()), to_string(key.shape()), name(key.dtype()), to_string(value.shape()),
             name(value.dtype()), name(dt));
  KVCache* cache = call.cache;
  if (cache) {
    KILN_CHECK(query_in.is_same(key_in) && key_in.is_same(value_in), kMha,
               "a KV cache is for self-attention: query, key and value must be one tensor");
    KILN_CHECK(!GradMode::is_enabled(), kMha, "a KV cache is for inference: run under NoGradGuard");
    KILN_CHECK(!call.mask.defined() && !call.additive_mask.defined(), kMha,
               "a call with a KV cache takes no mask or additive_mask");
    KILN_CHECK(cache->key.defined() && cache->value.defined() && cache->key.dim() == 4 &&
                   cache->key.shape() == cache->value.shape() && cache->key.size(0) == B && cache->key.size(1) == H &&
                   cache->key.size(3) == head_dim && cache->key.dtype() == dt && cache->value.dtype() == dt,
               kMha, "cache key {} {} and value {} {} must be [B, H, capacity, Dh] = [{}, {}, capacity, {}] {}",
               cache->key.defined() ? to_string(cache->key.shape()) : "undefined",
               cache->key.defined() ? name(cache->key.dtype()) : "-",
               cache->value.defined() ? to_string(cache->value.shape()) : "undefined",
               cache->value.defined() ? name(cache->value.dtype()) : "-", B, H, head_dim, name(dt));
    KILN_CHECK(cache->length >= 0 && cache->length + Tq <= cache->capacity(), kMha,
               "cache holds {} of {} positions: {} more do not fit", cache->length, cache->capacity(), Tq);
  }
  const Shape full{B, H, Tq, Tk};
  if (call.mask.defined()) {
    KILN_CHECK(call.mask.dtype() == kBool, kMha, "mask {} {} must be bool (true = allowed)",
               to_string(call.mask.shape()), name(call.mask.dtype()));
    KILN_CHECK(broadcasts_to(call.mask, full), kMha, "mask {} does not broadcast to [B, num_heads, Tq, Tk] = {}",
               to_string(call.mask.shape()), to_string(full));
  }
  if (call.additive_mask.defined()) {
    // With a compute dtype any floating mask is cast to it (below).
    KILN_CHECK(call.additive_mask.dtype() == dt || (compute_dtype() && is_floating(call.additive_mask.dtype())),
               kMha, "additive_mask {} {} must have the layer's dtype {}", to_string(call.additive_mask.shape()),
               name(call.additive_mask.dtype()), name(dt));
    KILN_CHECK(broadcasts_to(call.additive_mask, full), kMha,
               "additive_mask {} does not broadcast to [B, num_heads, Tq, Tk] = {}",
               to_string(call.additive_mask.shape()), to_string(full));
  }
  KILN_CHECK(!((call.need_weights || call.additive_mask.defined()) && policy == AttentionBackend::Flash), kMha,
             "policy Flash cannot return weights or take an additive_mask; use Auto or Standard, or pass "
             "need_weights = false (true by default, as in PyTorch)");
  const bool drop = is_training() && dropout > 0;
  KILN_CHECK(!drop || rngs != nullptr, kMha,
             "dropout {} in training draws from rngs: call forward(query, key, value, rngs, ...) or eval()", dropout);

  // ---- projections: q [B, Tq, D], k [B, Tk, D], v [B, Tk, D] ----
  const Tensor bias = to_compute(in_proj_bias);
  Tensor q, k, v;
  if (in_proj_weight.defined() && in_proj_quantized && !GradMode::is_enabled()) {
    // The quantized copy's rows [begin, begin + n) are the q, k or v projection.
    const QuantizedTensor& qw = *in_proj_quantized;
    auto rows = [&](int64_t begin, int64_t n) {
      QuantizedTensor p = qw;
      p.shape = {n, qw.cols()};
      p.codes = narrow(qw.codes, 0, begin, n);
      p.scales = narrow(qw.scales, 0, begin, n);
      return p;
    };
    auto proj = [&](const Tensor& x, int64_t begin, int64_t n) {
      return to_compute(quantized_linear(x, n == 3 * D ? qw : rows(begin, n), maybe_narrow(bias, begin, n)));
    };
    if (query.is_same(key) && key.is_same(value)) {
      std::vector<Tensor> qkv = split(proj(query, 0, 3 * D), D, 2);
      q = qkv[0];
      k = qkv[1];
      v = qkv[2];
    } else {
      q = proj(query, 0, D);
      k = proj(key, D, D);
      v = proj(value, 2 * D, D);
    }
  } else if (in_proj_weight.defined()) {
    KILN_CHECK(!is_released(in_proj_weight), kMha,
               "in_proj_weight was released for quantized inference (QuantizeOptions::release_float_weights): a "
               "forward needs grad mode off");
    const Tensor w = to_compute(in_proj_weight);
    if (query.is_same(key) && key.is_same(value)) {  // self-attention: one GEMM for q, k, v
      // [B, T, 3D] -> three views; split's vjp joins their grads with one cat.
      std::vector<Tensor> qkv = split(linear(query, w, bias), D, 2);
      q = qkv[0];
      k = qkv[1];
      v = qkv[2];
    } else if (key.is_same(value)) {  // cross-attention on one memory: one GEMM for k, v
      q = linear(query, narrow(w, 0, 0, D), maybe_narrow(bias, 0, D));
      std::vector<Tensor> kv = split(linear(key, narrow(w, 0, D, 2 * D), maybe_narrow(bias, D, 2 * D)), D, 2);
      k = kv[0];  // [B, Tk, D] each
      v = kv[1];
    } else {
      q = linear(query, narrow(w, 0, 0, D), maybe_narrow(bias, 0, D));
      k = linear(key, narrow(w, 0, D, D), maybe_narrow(bias, D, D));
      v = linear(value, narrow(w, 0, 2 * D, D), maybe_narrow(bias, 2 * D, D));
    }
  } else {
    q = linear(query, to_compute(q_proj_weight), maybe_narrow(bias, 0, D));
    k = linear(key, to_compute(k_proj_weight), maybe_narrow(bias, D, D));
    v = linear(value, to_compute(v_proj_weight), maybe_narrow(bias, 2 * D, D));
  }

  // ---- attention per head: [B, H, Tq, Dh] ----
  Tensor qh = split_heads(q, H), kh = split_heads(k, H), vh = split_heads(v, H);
  const int64_t offset = cache ? cache->length : 0;  // position of query row 0
  if (rotary) {
    qh = rotary_embedding(qh, {.base = rotary_base, .offset = offset});
    kh = rotary_embedding(kh, {.base = rotary_base, .offset = offset});
  }
  if (cache) {  // append the new rows, then attend over all length + Tq of them
    // (length grows only once the call has succeeded: a throw leaves the
    // cache as it was; rows past length are never read)
    const int64_t n = offset + Tq;
    copy_(narrow(cache->key, 2, offset, Tq), kh);
    copy_(narrow(cache->value, 2, offset, Tq), vh);
    kh = narrow(cache->key, 2, 0, n);
    vh = narrow(cache->value, 2, 0, n);
  }
  AttentionOptions ao{.mask = call.mask,
                      .additive_mask = to_compute(call.additive_mask),
                      .causal = call.causal,
                      .need_weights = call.need_weights || drop,
                      .policy = policy};
  AttentionResult r = scaled_dot_product_attention(qh, kh, vh, ao);
  Tensor heads = r.out, weights = r.weights;
  if (drop) {  // dropout on the weights, then recombine the values (PyTorch's order)
    Generator gen = rngs->next("dropout");
    weights = kiln::dropout(weights, dropout, /*training=*/true, gen);
    heads = matmul(weights, vh);
  }
  Tensor out = out_proj->forward(reshape(transpose(heads, 1, 2), {B, Tq, D}));  // [B, Tq, D]

  // ---- fully masked query rows: zero output, out_proj.bias included (spec 000) ----
  if (out_proj->bias.defined()) {
    Tensor allowed = call.mask;
    // Causal visibility alone leaves a row with no key only when Tq > Tk (row i
    // sees keys j <= i + Tk - Tq), so the common causal call skips this work.
    const bool causal_matters = call.causal && (Tq > Tk || call.mask.defined() || call.additive_mask.defined());
    if (causal_matters)
      allowed = allowed.defined() ? logical_and(allowed, causal_mask(Tq, Tk)) : causal_mask(Tq, Tk);
    if (call.additive_mask.defined()) {
      Tensor open = ne(call.additive_mask, -std::numeric_limits<double>::infinity());
      allowed = allowed.defined() ? logical_and(allowed, open) : open;
    }
    Tensor dead = dead_rows(allowed, Tq);  // [b, Tq, 1]
    if (dead.defined()) out = masked_fill(out, dead, 0);  // its vjp gives those rows zero gradient
  }

  if (cache) cache->length = offset + Tq;
  AttentionOutput result{out, Tensor(), Tensor()};
  if (call.need_weights) {  // weights [B, H, Tq, Tk]: both views from this one call
    result.head_weights = weights;
    result.weights = call.average_attn_weights ? mean(weights, {1}) : weights;
  }
  return result;
}

KVCache MultiheadAttention::make_cache(int64_t batch, int64_t capacity) const {
  KILN_CHECK(batch > 0 && capacity > 0, kMha, "make_cache: batch {} and capacity {} must be positive", batch,
             capacity);
  const TensorOptions o{.dtype = compute_dtype().value_or(out_proj->weight.dtype())};
  return KVCache{zeros({batch, num_heads, capacity, head_dim}, o), zeros({batch, num_heads, capacity, head_dim}, o), 0};
}

std::string MultiheadAttention::extra_repr() const {
  std::string s = fmt::format("embed_dim={}, num_heads={}, dropout={}, bias={}", embed_dim, num_heads, dropout,
                              in_proj_bias.defined());
  if (kdim != embed_dim || vdim != embed_dim) s += fmt::format(", kdim={}, vdim={}", kdim, vdim);
  if (policy != AttentionBackend::Auto) s += fmt::format(", policy={}", policy_name(policy));
  if (rotary) s += fmt::format(", rotary=true, rotary_base={}", rotary_base);
  return s;
}

// ---- TransformerBlock ----

TransformerBlock::TransformerBlock(int64_t D, int64_t H, const Init& init, const TransformerBlockOptions& o)
    : dim(D), num_heads(H), dim_feedforward(o.dim_feedforward.value_or(std::llround(o.mlp_ratio * double(D)))),
      options(o) {
  KILN_CHECK(D > 0 && H > 0, kBlock, "dim {} and num_heads {} must be positive", D, H);
  KILN_CHECK(D % H == 0, kBlock, "dim {} is not divisible by num_heads {}", D, H);
  KILN_CHECK(dim_feedforward > 0, kBlock, "dim_feedforward {} (mlp_ratio {}) must be positive", dim_feedforward,
             o.mlp_ratio);
  KILN_CHECK(o.dropout >= 0 && o.dropout <= 1, kBlock, "dropout must be in [0, 1], got {}", o.dropout);
  KILN_CHECK(o.norm_eps > 0, kBlock, "norm_eps must be positive, got {}", o.norm_eps);
  KILN_CHECK(!o.adaln_zero || o.cond_dim > 0, kBlock, "adaln_zero needs cond_dim > 0, got {}", o.cond_dim);
  KILN_CHECK(o.adaln_zero || o.cond_dim == 0, kBlock, "cond_dim {} is given but adaln_zero is off", o.cond_dim);
  const bool rms = o.norm == TransformerNorm::rms_norm;
  KILN_CHECK(!rms || !o.adaln_zero, kBlock, "adaln_zero modulates LayerNorms; norm rms_norm is not supported with it");
  self_attn = register_module("self_attn", MultiheadAttention(D, H, init,
                                                              {.bias = o.bias,
                                                               .dropout = o.dropout,
                                                               .policy = o.policy,
                                                               .rotary = o.rotary,
                                                               .rotary_base = o.rotary_base}));
  // SwiGLU's gate and up projections are one [2F, D] GEMM.
  const int64_t up = o.activation == TransformerActivation::swiglu ? 2 * dim_feedforward : dim_feedforward;
  if (o.moe) {
    moe = register_module("moe", MoE(D, *o.moe, init));
  } else {
    linear1 = register_module("linear1", Linear(D, up, init, o.bias));
    linear2 = register_module("linear2", Linear(dim_feedforward, D, init, o.bias));
  }
  if (rms) {
    rms_norm1 = register_module("norm1", RMSNorm({D}, init, o.norm_eps));
    rms_norm2 = register_module("norm2", RMSNorm({D}, init, o.norm_eps));
  } else {
    const LayerNormOptions no{.eps = o.norm_eps, .elementwise_affine = !o.adaln_zero, .bias = o.norm_bias};
    norm1 = register_module("norm1", LayerNorm({D}, init, no));
    norm2 = register_module("norm2", LayerNorm({D}, init, no));
  }
  if (o.adaln_zero) {
    Init zero = init;  // AdaLN-Zero: the modulation starts at zero, so the block starts as the identity
    zero.weight = init::zeros();
    zero.bias = init::zeros();
    adaLN_modulation = register_module("adaLN_modulation", Linear(o.cond_dim, 6 * D, zero, true));
  }
}

Tensor TransformerBlock::forward(const Tensor& x, const BlockCall& call) const { return run(x, nullptr, call); }

Tensor TransformerBlock::norm(int which, const Tensor& x) const {
  if (rms_norm1) return (which == 1 ? rms_norm1 : rms_norm2)->forward(x);
  return (which == 1 ? norm1 : norm2)->forward(x);
}

Tensor TransformerBlock::forward(const Tensor& x, Rngs& rngs, const BlockCall& call) const {
  return run(x, &rngs, call);
}

Tensor TransformerBlock::run(const Tensor& x_in, Rngs* rngs, const BlockCall& call) const {
  KILN_CHECK(x_in.defined() && x_in.dim() == 3 && x_in.size(2) == dim, kBlock, "x {} must be [B, T, D = {}]",
             x_in.defined() ? to_string(x_in.shape()) : "undefined", dim);
  const Tensor x = to_compute(x_in);  // mixed precision: the residual stream in the compute dtype
  const DType dt = compute_dtype().value_or(moe ? moe->w1.dtype() : linear1->weight.dtype());
  KILN_CHECK(x.dtype() == dt, kBlock, "x {} {} must have the block's dtype {}", to_string(x.shape()), name(x.dtype()),
             name(dt));
  const int64_t B = x.size(0);
  if (options.adaln_zero) {
    const Tensor& c = call.cond;
    KILN_CHECK(c.defined(), kBlock, "adaln_zero needs cond [B, cond_dim] = [{}, {}]", B, options.cond_dim);
    // With a compute dtype any floating cond is fine: adaLN_modulation casts it.
    KILN_CHECK(c.dim() == 2 && c.size(0) == B && c.size(1) == options.cond_dim &&
                   (c.dtype() == dt || (compute_dtype() && is_floating(c.dtype()))),
               kBlock,
               "cond {} {} must be [B, cond_dim] = [{}, {}] {} for x {}", to_string(c.shape()), name(c.dtype()), B,
               options.cond_dim, name(dt), to_string(x.shape()));
  } else {
    KILN_CHECK(!call.cond.defined(), kBlock, "cond {} is given but adaln_zero is off",
               to_string(call.cond.shape()));
  }
  const double p = options.dropout;
  const bool drop = is_training() && p > 0;
  KILN_CHECK(!drop || rngs != nullptr, kBlock,
             "dropout {} in training draws from rngs: call forward(x, rngs, ...) or eval()", p);

  auto dropped = [&](const Tensor& t) {
    if (!drop) return t;
    Generator gen = rngs->next("dropout");
    return kiln::dropout(t, p, /*training=*/true, gen);
  };
  // need_weights = false: the block uses only the output, so Auto keeps the flash path.
  const AttentionCall ac{.mask = call.mask,
                         .additive_mask = call.additive_mask,
                         .causal = options.causal,
                         .need_weights = false,
                         .cache = call.cache};
  auto attn = [&](const Tensor& h) {  // self-attention: h is query, key and value (one GEMM)
    return dropped(rngs ? self_attn->forward(h, h, h, *rngs, ac).output : self_attn->forward(h, h, h, ac).output);
  };
  auto mlp = [&](const Tensor& h) {
    if (moe) return dropped(moe->forward(h));
    Tensor a = linear1->forward(h);  // [B, T, F]
    switch (options.activation) {
      case TransformerActivation::gelu: a = gelu(a); break;
      case TransformerActivation::gelu_tanh: a = gelu(a, GeluApproximation::tanh); break;
      case TransformerActivation::relu: a = relu(a); break;
      case TransformerActivation::swiglu: {  // [B, T, 2F] -> silu(gate) * up [B, T, F]
        std::vector<Tensor> gu = split(a, dim_feedforward, -1);
        a = mul(silu(gu[0]), gu[1]);
        break;
      }
    }
    return dropped(linear2->forward(dropped(a)));
  };

  if (!options.adaln_zero) {
    Tensor h = add(x, attn(norm(1, x)));
    return add(h, mlp(norm(2, h)));
  }
  // AdaLN-Zero (DiT): six [B, 1, D] pieces from the condition.
  std::vector<Tensor> m = chunk(unsqueeze(adaLN_modulation->forward(silu(call.cond)), 1), 6, -1);
  auto modulate = [](const Tensor& n, const Tensor& shift, const Tensor& scale) {
    return add(mul(n, add(scale, 1)), shift);
  };
  Tensor h = add(x, mul(m[2], attn(modulate(norm1->forward(x), m[0], m[1]))));
  return add(h, mul(m[5], mlp(modulate(norm2->forward(h), m[3], m[4]))));
}

std::string TransformerBlock::extra_repr() const {
  const char* act = options.activation == TransformerActivation::gelu        ? "gelu"
                    : options.activation == TransformerActivation::gelu_tanh ? "gelu_tanh"
                    : options.activation == TransformerActivation::swiglu    ? "swiglu"
                                                                             : "relu";
  std::string s = fmt::format("dim={}, num_heads={}, dim_feedforward={}, dropout={}, activation={}, norm_eps={}",
                              dim, num_heads, dim_feedforward, options.dropout, act, options.norm_eps);
  if (options.norm == TransformerNorm::rms_norm) s += ", norm=rms_norm";
  if (options.rotary) s += ", rotary=true";
  if (options.causal) s += ", causal=true";
  if (options.adaln_zero) s += fmt::format(", adaln_zero=true, cond_dim={}", options.cond_dim);
  if (moe) s += ", moe=true";
  return s;
}

}  // namespace kiln::nn
