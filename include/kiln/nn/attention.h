// Attention layers (SPECS L14, L17; spec 000 "Attention"): MultiheadAttention
// and a pre-norm TransformerBlock with optional AdaLN-Zero conditioning, both
// wrapping scaled_dot_product_attention (include/kiln/ops/attention.h).
// Letter legend: B batch, T tokens (Tq queries, Tk keys), D model width,
// H heads, Dh = D / H head width, F feed-forward width, C cond_dim.
// Masks are bool with **true = allowed** (PyTorch's attn_mask: true = NOT allowed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "kiln/core/rngs.h"
#include "kiln/nn/init.h"
#include "kiln/nn/linear.h"
#include "kiln/nn/module.h"
#include "kiln/nn/moe.h"
#include "kiln/nn/norm.h"
#include "kiln/ops/attention.h"

namespace kiln::nn {

struct MultiheadAttentionOptions {
  bool bias = true;      // in_proj_bias and out_proj.bias
  double dropout = 0.0;  // on the attention weights, in training, drawn from rngs.next("dropout")
  /// Key / value feature sizes when they differ from D (PyTorch's kdim / vdim):
  /// then q_proj_weight [D, D], k_proj_weight [D, kdim], v_proj_weight [D, vdim]
  /// replace in_proj_weight, as in PyTorch.
  std::optional<int64_t> kdim{};
  std::optional<int64_t> vdim{};
  AttentionBackend policy = AttentionBackend::Auto;
  /// Rotary position embedding (L15) of each head's q and k after the projections
  /// (half-split pairs, GPT-NeoX / LLaMA), positions offset by a KV cache's length.
  bool rotary = false;
  double rotary_base = 10000;
};

/// One self-attention layer's keys and values for incremental decoding:
/// key and value [B, H, capacity, Dh], preallocated (MultiheadAttention::
/// make_cache), rows [0, length) filled. Inference only: the cached rows carry
/// no gradient, so a call with a cache needs grad mode off.
struct KVCache {
  Tensor key, value;
  int64_t length = 0;
  int64_t capacity() const { return key.defined() ? key.size(2) : 0; }
};

/// What one MultiheadAttention call is told.
struct AttentionCall {
  /// Bool, true = allowed, broadcastable to [B, H, Tq, Tk] (padding_mask(valid)
  /// gives [B, 1, 1, Tk], causal_mask(T) [1, 1, T, T]); undefined: all allowed.
  Tensor mask{};
  /// Float (the layer's dtype), broadcastable to [B, H, Tq, Tk], added to the
  /// scores; -inf disallows a key. Takes the standard path.
  Tensor additive_mask{};
  /// Key j allowed for query i iff j <= i + (Tk - Tq) (and'ed with mask).
  bool causal = false;
  /// Also return the attention weights, as PyTorch does by default. They are
  /// materialised by the standard path; need_weights = false keeps the fused
  /// flash path (policy Auto), the fast choice when only the output is used
  /// (TransformerBlock and the models pass false).
  bool need_weights = true;
  /// AttentionOutput::weights averaged over heads [B, Tq, Tk] (PyTorch's
  /// default); false: per head [B, H, Tq, Tk]. head_weights is filled either way.
  bool average_attn_weights = true;
  /// Self-attention continuing a sequence: the new keys and values (query's Tq
  /// rows, rotated to positions length..length + Tq - 1) are written into the
  /// cache at [length, length + Tq), the queries attend to its first
  /// length + Tq rows (with causal, bottom-right aligned), and length grows by
  /// Tq. With need_weights the weights span those length + Tq keys.
  KVCache* cache = nullptr;
};

/// What one MultiheadAttention call returns. `auto [out, w] = mha.forward(...)`
/// binds output and weights, as PyTorch's `out, w = mha(q, k, v)` (a
/// two-element tuple protocol below); head_weights is read by name.
struct AttentionOutput {
  Tensor output;   // [B, Tq, D]
  Tensor weights;  // [B, Tq, Tk] averaged over heads, or [B, H, Tq, Tk] with
                   // average_attn_weights = false; undefined unless need_weights
  Tensor head_weights;  // [B, H, Tq, Tk] from the same call (no second call); undefined unless need_weights

  /// Structured binding: get<0> output, get<1> weights.
  template <std::size_t I>
  Tensor get() const {
    static_assert(I < 2, "AttentionOutput binds (output, weights); read head_weights by name");
    return I == 0 ? output : weights;
  }
};

/// Multi-head attention (L14): out_proj(concat_h softmax(q_h k_h^T / sqrt(Dh)) v_h)
/// with q, k, v = the input projections of query [B, Tq, D], key [B, Tk, kdim]
/// and value [B, Tk, vdim]. Parameter names and layouts are PyTorch's
/// nn.MultiheadAttention (in_proj_weight [3D, D], in_proj_bias [3D],
/// out_proj.weight [D, D], out_proj.bias [D]), so its state_dict loads.
///
/// A query row with no allowed key (in every head) gets zero weights and a
/// zero output, out_proj.bias included, with finite (zero) gradients; PyTorch
/// gives NaN there.
///
///   nn::MultiheadAttention mha(256, 4, rngs);
///   auto [y, w] = mha.forward(x, x, x, {.mask = padding_mask(valid)});  // w [B, Tq, Tk] (PyTorch's default)
///   AttentionOutput r = mha.forward(x, x, x);                            // r.head_weights [B, H, Tq, Tk] too
///   Tensor fast = mha.forward(x, x, x, {.need_weights = false}).output;  // the flash path
class MultiheadAttention : public Module {
 public:
  /// embed_dim % num_heads == 0. Projection weights from init.weight with the
  /// fan of one [D, D] projection (fan_in = D, kdim or vdim), biases from init.bias.
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, const Init& init,
                     const MultiheadAttentionOptions& options = {});

  /// Without randomness: attention dropout must be off (eval, or dropout 0).
  AttentionOutput forward(const Tensor& query, const Tensor& key, const Tensor& value,
                          const AttentionCall& call = {}) const;
  /// Attention dropout (training, dropout > 0) draws rngs.next("dropout").
  AttentionOutput forward(const Tensor& query, const Tensor& key, const Tensor& value, Rngs& rngs,
                          const AttentionCall& call = {}) const;

  /// An empty cache for `capacity` positions of `batch` sequences, in the layer's
  /// (compute) dtype: key and value zeros [batch, H, capacity, Dh].
  KVCache make_cache(int64_t batch, int64_t capacity) const;

  std::string extra_repr() const override;

  int64_t embed_dim;
  int64_t num_heads;
  int64_t head_dim;
  int64_t kdim;
  int64_t vdim;
  double dropout;
  AttentionBackend policy;
  bool rotary;
  double rotary_base;
  Parameter in_proj_weight;  // [3D, D] when kdim == vdim == D, else undefined
  Parameter q_proj_weight;   // [D, D]    only when kdim or vdim != D
  Parameter k_proj_weight;   // [D, kdim] only when kdim or vdim != D
  Parameter v_proj_weight;   // [D, vdim] only when kdim or vdim != D
  Parameter in_proj_bias;    // [3D], undefined without bias
  Shared<Linear> out_proj;   // D -> D
  // Set by nn::quantize(module, ...) (kiln/nn/quantized.h): with grad mode off,
  // the q, k, v projections multiply by this quantized copy of in_proj_weight.
  std::shared_ptr<const QuantizedTensor> in_proj_quantized;

 private:
  AttentionOutput run(const Tensor& query, const Tensor& key, const Tensor& value, Rngs* rngs,
                      const AttentionCall& call) const;
};

/// The MLP's nonlinearity. swiglu (LLaMA): linear2(silu(g) * u) with [g, u] =
/// linear1(x) split in halves, so linear1 is D -> 2F (gate rows first).
enum class TransformerActivation { gelu, gelu_tanh, relu, swiglu };

/// norm1, norm2 (and a model's final norm): LayerNorm, or RMSNorm (LLaMA).
enum class TransformerNorm { layer_norm, rms_norm };

struct TransformerBlockOptions {
  /// The MLP's hidden width F; default mlp_ratio * D.
  std::optional<int64_t> dim_feedforward{};
  double mlp_ratio = 4.0;
  /// Dropout on the attention weights, after the activation and on both
  /// residual branches (PyTorch's TransformerEncoderLayer dropout placement).
  double dropout = 0.0;
  TransformerActivation activation = TransformerActivation::gelu;
  double norm_eps = 1e-5;
  TransformerNorm norm = TransformerNorm::layer_norm;  // rms_norm: no bias, no adaln_zero
  /// Rotary embedding of q and k in self_attn (MultiheadAttentionOptions::rotary).
  bool rotary = false;
  double rotary_base = 10000;
  /// Causal self-attention by default in forward.
  bool causal = false;
  /// DiT's AdaLN-Zero: norms without affine, modulated by adaLN_modulation(silu(cond)).
  bool adaln_zero = false;
  int64_t cond_dim = 0;  // C, required with adaln_zero
  bool bias = true;      // every Linear's bias
  bool norm_bias = true;  // norm1/norm2's bias (false with bias = false: nanoGPT's bias=False)
  AttentionBackend policy = AttentionBackend::Auto;
  /// A mixture-of-experts FFN (nn::MoE, registered as "moe") in place of
  /// linear1/linear2 (both null then); every other parameter keeps its name.
  /// Its experts use moe->activation; `activation` and dim_feedforward are not
  /// used. Its balancing losses: moe->aux_loss() after forward.
  std::optional<MoEOptions> moe{};
};

/// What one TransformerBlock call is told.
struct BlockCall {
  Tensor mask{};           // bool, true = allowed, broadcastable to [B, H, T, T]
  Tensor additive_mask{};  // float, added to the scores, broadcastable to [B, H, T, T]
  Tensor cond{};           // [B, C]; required with adaln_zero, refused without
  KVCache* cache = nullptr;  // self_attn's cache (AttentionCall::cache)
};

/// Pre-norm transformer block (L17): x + attn(norm1(x)), then x + mlp(norm2(x)),
/// mlp = linear2(act(linear1(.))). Names as torch.nn.TransformerEncoderLayer
/// (norm_first=True, batch_first=True): self_attn.*, linear1, linear2, norm1, norm2.
/// With norm = rms_norm the norms are RMSNorms (rms_norm1, rms_norm2, still named
/// norm1, norm2 in the state dict) and norm1 / norm2 are null.
///
/// With adaln_zero (DiT), adaLN_modulation = Linear(C, 6D), zero-initialised,
/// maps silu(cond) to shift/scale/gate for both sublayers:
/// x + gate * sublayer(norm(x) * (1 + scale) + shift). At initialisation the
/// block is the identity.
///
///   nn::TransformerBlock block(256, 4, rngs, {.causal = true});
///   Tensor y = block.forward(x);  // x [B, T, 256]
class TransformerBlock : public Module {
 public:
  TransformerBlock(int64_t dim, int64_t num_heads, const Init& init, const TransformerBlockOptions& options = {});

  /// x [B, T, D] -> [B, T, D]; dropout must be off (eval or dropout 0).
  Tensor forward(const Tensor& x, const BlockCall& call = {}) const;
  /// Dropout (training, dropout > 0) draws from rngs.next("dropout").
  Tensor forward(const Tensor& x, Rngs& rngs, const BlockCall& call = {}) const;

  std::string extra_repr() const override;

  int64_t dim;
  int64_t num_heads;
  int64_t dim_feedforward;
  TransformerBlockOptions options;
  Shared<MultiheadAttention> self_attn;
  Shared<Linear> linear1;  // D -> F (D -> 2F with swiglu)
  Shared<Linear> linear2;  // F -> D
  Shared<LayerNorm> norm1;  // null with rms_norm
  Shared<LayerNorm> norm2;
  Shared<RMSNorm> rms_norm1;  // only with rms_norm
  Shared<RMSNorm> rms_norm2;
  Shared<Linear> adaLN_modulation;  // C -> 6D, only with adaln_zero
  Shared<MoE> moe;                  // only with options.moe (then linear1/linear2 are null)

 private:
  Tensor norm(int which, const Tensor& x) const;  // norm1 / norm2 whichever kind
  Tensor run(const Tensor& x, Rngs* rngs, const BlockCall& call) const;
};

}  // namespace kiln::nn

// AttentionOutput's tuple protocol: two elements, output and weights.
namespace std {
template <>
struct tuple_size<kiln::nn::AttentionOutput> : integral_constant<size_t, 2> {};
template <size_t I>
struct tuple_element<I, kiln::nn::AttentionOutput> {
  using type = kiln::Tensor;
};
}  // namespace std
