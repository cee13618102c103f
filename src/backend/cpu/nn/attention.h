// CPU kernels of scaled_dot_product_attention's flash path: a tiled forward
// with online softmax that saves only out and the row logsumexp, and a tiled
// backward that recomputes the probabilities blockwise; plus the plain
// reference versions the tests compare them with.
#pragma once

#include <cstdint>

#include "kiln/core/error.h"
#include "kiln/core/tensor.h"

namespace kiln::backend::cpu {

/// What every attention kernel is told. B batch, H heads, Tq queries, Tk keys,
/// Dh query/key dim, Dv value dim.
struct AttentionShape {
  int64_t B = 0, H = 0, Tq = 0, Tk = 0, Dh = 0, Dv = 0;
  double scale = 1.0;
  bool causal = false;  // key j allowed for query i iff j <= i + (Tk - Tq)
  /// Bool mask (true = allowed) viewed as [B, H, Tq, Tk] with stride 0 along
  /// broadcast dims, or undefined (all allowed).
  Tensor mask{};
};

/// The flash forward. q [B,H,Tq,Dh], k [B,H,Tk,Dh], v [B,H,Tk,Dv], f32 or f64,
/// each with unit stride along its last dim and any other strides (the heads of
/// a [B, T, H * D] projection are read in place); writes out [B,H,Tq,Dv] (any
/// strides with a unit last one) and lse [B,H,Tq] (contiguous, same dtype).
/// lse is the row's logsumexp of the scaled, masked scores, +inf for a row
/// with no allowed key (so that exp(s - lse) is 0 there in backward); such a
/// row's output is 0.
void flash_attention_forward(const AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& lse);

/// The flash backward: from the forward's inputs, out, lse and the output
/// gradient dout [B,H,Tq,Dv] (one dtype; q, k, v, out as in the forward; dout
/// may have any strides, 0 included), writes dq, dk, dv (shapes of q, k, v,
/// any strides with a unit last one).
void flash_attention_backward(const AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& dout, const Tensor& lse, const Tensor& dq,
                              const Tensor& dk, const Tensor& dv);

namespace ref {
// Plain loops in f64, one query row at a time with its whole score row
// materialised (same contracts as above, but every operand except dout contiguous).
void flash_attention_forward(const AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& lse);
void flash_attention_backward(const AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& dout, const Tensor& lse, const Tensor& dq,
                              const Tensor& dk, const Tensor& dv);
}  // namespace ref

}  // namespace kiln::backend::cpu
