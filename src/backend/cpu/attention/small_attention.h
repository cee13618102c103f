// CPU kernels of scaled_dot_product_attention's small-sequence path (at most
// kSmallAttentionMaxKeys queries and keys, no mask): one task per (batch,
// head) computes the scores, the softmax and P V with every operand in L1
// and keeps the probabilities for the backward, which is fused likewise (no
// recomputation). The DiT's 49-token attention is the case it is for
// (docs/performance.md, "third pass: DiT"). Letter legend: B batch, H heads,
// Tq queries, Tk keys, Dh query/key dim, Dv value dim.
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln::backend::cpu {

/// The largest Tq and Tk the small-sequence kernels take; the saved
/// probabilities are rows of this many entries (keys past Tk hold 0).
constexpr int64_t kSmallAttentionMaxKeys = 64;

struct SmallAttentionShape {
  int64_t B = 0, H = 0, Tq = 0, Tk = 0, Dh = 0, Dv = 0;
  double scale = 1.0;
};

/// Forward: q [B,H,Tq,Dh], k [B,H,Tk,Dh], v [B,H,Tk,Dv], one dtype (f32, f64 or
/// bf16), each with unit stride along its last dim and any other strides (the
/// heads of a [B, T, 3 H D] projection are read in place); Tq, Tk in
/// [1, kSmallAttentionMaxKeys]. Writes out [B,H,Tq,Dv] (q's dtype, any strides
/// with a unit last one) and probs, contiguous [B,H,Tq,kSmallAttentionMaxKeys]
/// in the compute dtype (f64 for f64, else f32): softmax(scale q k^T) per row,
/// zero past Tk. bf16 operands are computed in f32 and the output rounded once.
void small_attention_forward(const SmallAttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& probs);

/// Backward from the forward's q, k, v, probs and the output gradient dout
/// [B,H,Tq,Dv] (q's dtype, unit last stride): writes dq, dk, dv (shapes and
/// dtype of q, k, v; any strides with a unit last one). With P the
/// probabilities: dV = P^T dout, dP = dout V^T, dS = P * (dP - rowsum(P * dP)),
/// dQ = scale dS K, dK = scale dS^T Q.
void small_attention_backward(const SmallAttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& probs, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                              const Tensor& dv);

namespace ref {
// Plain loops in f64 over the same contracts (any strides with a unit last one).
void small_attention_forward(const SmallAttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& probs);
void small_attention_backward(const SmallAttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& probs, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                              const Tensor& dv);
}  // namespace ref

}  // namespace kiln::backend::cpu
