// Scaled dot-product attention (SPECS.md L14) and its boolean masks: a
// standard path composed of kiln ops and a fused flash path (tiled, online
// softmax, O(T) memory). Letter legend: B batch, H heads, Tq queries, Tk keys,
// Dh query/key head dim, Dv value head dim.
#pragma once

#include <optional>

#include "kiln/core/tensor.h"

namespace kiln {

/// Which implementation scaled_dot_product_attention runs.
enum class AttentionBackend {
  Auto,      // Flash unless need_weights or additive_mask (then Standard); at most 64 queries and keys
             // with no mask and no weights: a fused small-sequence kernel (probabilities kept for backward)
  Standard,  // matmul, masked_fill, softmax, matmul: materialises [B, H, Tq, Tk]
  Flash,     // fused tiled kernel: never materialises [Tq, Tk]; cannot return weights
};

/// Options of scaled_dot_product_attention, set with designated initializers:
/// `scaled_dot_product_attention(q, k, v, {.causal = true})`.
struct AttentionOptions {
  /// Bool, **true = allowed**, broadcastable to [B, H, Tq, Tk]; undefined: all allowed.
  Tensor mask{};
  /// Float (q's dtype), broadcastable to [B, H, Tq, Tk], added to the scaled
  /// scores before the softmax: spec 002's explicit additive mask (padding and
  /// bidirectional masks as 0 / -inf, relative-position biases). -inf marks a
  /// disallowed key; a row whose keys are all disallowed (by -inf, `mask` or
  /// `causal`) is fully masked: zero weights and output, finite gradients (an
  /// all -inf row is NaN in PyTorch). Differentiable. Standard path only: Auto
  /// picks Standard when it is given; Flash with it is an error.
  Tensor additive_mask{};
  /// Query i sees key j only when j <= i + (Tk - Tq): the causal diagonal is
  /// aligned to the bottom-right, so the last query sees every key (KV-cache
  /// decoding), as PyTorch 2.x's `causal_lower_right`. For Tq == Tk this is
  /// j <= i, as PyTorch 2.x's is_causal; for Tq != Tk is_causal aligns to the
  /// top-left instead (j <= i, `causal_upper_left`; pass an explicit mask for
  /// that). PyTorch 1.13 has no is_causal. Combined with `mask` by logical and.
  bool causal = false;
  /// Multiplies q k^T; default 1 / sqrt(Dh).
  std::optional<double> scale{};
  /// Also return the attention weights [B, H, Tq, Tk] (Standard path only).
  bool need_weights = false;
  AttentionBackend policy = AttentionBackend::Auto;
};

/// out [B, H, Tq, Dv]; weights [B, H, Tq, Tk] when need_weights, else undefined.
struct AttentionResult {
  Tensor out;
  Tensor weights;
};

/// softmax(q k^T * scale, masked) v for q [B, H, Tq, Dh], k [B, H, Tk, Dh],
/// v [B, H, Tk, Dv]; f32, f64 or bf16 (bf16 computes in f32), all one dtype.
/// A query row with no allowed key gets zero weights and a zero output, with
/// zero (finite) gradients, on both paths. Differentiable in q, k and v;
/// double backward through the flash path recomputes the standard path's
/// gradient formula with kiln ops.
///
///   auto [out, w] = scaled_dot_product_attention(q, k, v, {.mask = padding_mask(valid), .need_weights = true});
AttentionResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const AttentionOptions& options = {});

/// Bool [1, 1, T, T], true on and below the diagonal (key j <= query i).
Tensor causal_mask(int64_t T);
/// Bool [1, 1, Tq, Tk], true where j <= i + (Tk - Tq) (the `causal` option's rule).
Tensor causal_mask(int64_t Tq, int64_t Tk);
/// Bool [B, 1, 1, T] from valid [B, T] (bool, true = a real token): a
/// key-padding mask that broadcasts over heads and queries.
Tensor padding_mask(const Tensor& valid);

}  // namespace kiln
