// scaled_dot_product_attention: argument checks, the policy, the standard
// path composed of kiln ops, the flash path (backend::cpu::flash_attention_* with a
// fused vjp), and the causal / padding mask helpers.
// Letter legend: B batch, H heads, Tq queries, Tk keys, Dh q/k dim, Dv v dim.
#include "kiln/ops/attention.h"

#include <array>
#include <cmath>
#include <limits>

#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/record.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "src/backend/backend.h"
#include "src/backend/cpu/attention/small_attention.h"
#include "src/backend/cpu/nn/attention.h"
#include "src/ops/checks.h"

namespace kiln {

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// The checked problem: sizes, scale and the masks as given.
struct Problem {
  int64_t B = 0, H = 0, Tq = 0, Tk = 0, Dh = 0, Dv = 0;
  double scale = 1.0;
  bool causal = false;
  Tensor mask;  // as given (bool, broadcastable to [B, H, Tq, Tk]) or undefined
  Tensor additive;  // as given (q's dtype, broadcastable to [B, H, Tq, Tk]) or undefined
};

// Whether `m` broadcasts to `full` ([B, H, Tq, Tk]).
bool broadcasts_to(const Tensor& m, const Shape& full) {
  bool ok = m.dim() <= 4;
  for (int64_t i = 0; ok && i < m.dim(); ++i) {
    int64_t have = m.size(m.dim() - 1 - i), want = full[size_t(3 - i)];
    ok = have == want || have == 1;
  }
  return ok;
}

Problem check(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  check_defined(kOp, q, "q");
  check_defined(kOp, k, "k");
  check_defined(kOp, v, "v");
  backend::device_of(kOp, q, k, v, o.mask, o.additive_mask);
  KILN_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, kOp,
             "q, k and v must be 4-D [B, H, T, D], got q {}, k {} and v {}", to_string(q.shape()),
             to_string(k.shape()), to_string(v.shape()));
  KILN_CHECK(is_floating(q.dtype()) && q.dtype() == k.dtype() && q.dtype() == v.dtype(), kOp,
             "q, k and v must share one floating dtype (f32, f64 or bf16), got q {} {}, k {} {} and v {} {}",
             to_string(q.shape()), name(q.dtype()), to_string(k.shape()), name(k.dtype()), to_string(v.shape()),
             name(v.dtype()));
  Problem p;
  p.B = q.size(0);
  p.H = q.size(1);
  p.Tq = q.size(2);
  p.Dh = q.size(3);
  p.Tk = k.size(2);
  p.Dv = v.size(3);
  KILN_CHECK(k.size(0) == p.B && v.size(0) == p.B && k.size(1) == p.H && v.size(1) == p.H, kOp,
             "batch and head dims [B, H] must match: q {}, k {} and v {}", to_string(q.shape()),
             to_string(k.shape()), to_string(v.shape()));
  KILN_CHECK(k.size(3) == p.Dh, kOp, "q {} and k {} differ in head dim (Dh {} vs {})", to_string(q.shape()),
             to_string(k.shape()), p.Dh, k.size(3));
  KILN_CHECK(v.size(2) == p.Tk, kOp, "k {} and v {} differ in key count (Tk {} vs {})", to_string(k.shape()),
             to_string(v.shape()), p.Tk, v.size(2));
  KILN_CHECK(p.Dh > 0 || o.scale.has_value(), kOp, "q {} has head dim 0: the default scale 1/sqrt(Dh) is undefined",
             to_string(q.shape()));
  p.scale = o.scale.value_or(p.Dh > 0 ? 1.0 / std::sqrt(double(p.Dh)) : 1.0);
  KILN_CHECK(std::isfinite(p.scale), kOp, "scale must be finite, got {}", p.scale);
  p.causal = o.causal;
  if (o.mask.defined()) {
    const Tensor& m = o.mask;
    KILN_CHECK(m.dtype() == kBool, kOp, "mask must be bool (true = allowed), got {} {}", to_string(m.shape()),
               name(m.dtype()));
    const Shape full{p.B, p.H, p.Tq, p.Tk};
    KILN_CHECK(broadcasts_to(m, full), kOp, "mask {} does not broadcast to [B, H, Tq, Tk] = {}",
               to_string(m.shape()), to_string(full));
    p.mask = m;
  }
  if (o.additive_mask.defined()) {
    const Tensor& a = o.additive_mask;
    KILN_CHECK(a.dtype() == q.dtype(), kOp, "additive_mask must have q's dtype {}, got {} {}", name(q.dtype()),
               to_string(a.shape()), name(a.dtype()));
    const Shape full{p.B, p.H, p.Tq, p.Tk};
    KILN_CHECK(broadcasts_to(a, full), kOp, "additive_mask {} does not broadcast to [B, H, Tq, Tk] = {}",
               to_string(a.shape()), to_string(full));
    KILN_CHECK(o.policy != AttentionBackend::Flash, kOp,
               "the flash path takes no additive_mask; use policy Standard (or Auto) with it");
    p.additive = a;
  }
  KILN_CHECK(!(o.need_weights && o.policy == AttentionBackend::Flash), kOp,
             "the flash path does not materialise the weights; use policy Standard (or Auto) with need_weights");
  return p;
}

// mask and the causal rule combined (bool, broadcastable), or undefined when
// every key is allowed.
Tensor allowed_mask(const Problem& p) {
  if (!p.causal) return p.mask;
  Tensor c = causal_mask(p.Tq, p.Tk);
  return p.mask.defined() ? logical_and(p.mask, c) : c;
}

// softmax(q k^T * scale) over the allowed keys [B, H, Tq, Tk], with rows that
// allow no key set to 0. Those rows are given all keys before the softmax, so
// softmax and its vjp stay finite, then zeroed by masked_fill, whose vjp
// passes them a zero gradient.
//
// An additive mask is added to the scores; its -inf entries join the
// disallowed keys and are added as 0, so a row with every key at -inf is a
// fully masked row like any other (finite scores, then zeroed).
Tensor standard_weights(const Tensor& q, const Tensor& k, Tensor allowed, double scale,
                        const Tensor& additive = {}) {
  Tensor scores = mul(matmul(q, transpose(k, -2, -1)), scale);
  if (additive.defined()) {
    Tensor blocked = eq(additive, -std::numeric_limits<double>::infinity());
    if (any(blocked).item<bool>()) {
      scores = add(scores, masked_fill(additive, blocked, 0));
      Tensor open = logical_not(blocked);
      allowed = allowed.defined() ? logical_and(allowed, open) : open;
    } else {
      scores = add(scores, additive);
    }
  }
  if (!allowed.defined()) return softmax(scores, -1);
  Tensor some = any(allowed, -1, /*keepdim=*/true);  // [..., Tq, 1]: the row allows a key
  scores = masked_fill(scores, logical_and(logical_not(allowed), some), -std::numeric_limits<double>::infinity());
  Tensor w = softmax(scores, -1);
  Tensor dead = logical_not(some);
  if (any(dead).item<bool>()) w = masked_fill(w, dead, 0);
  return w;
}

AttentionResult standard(const Tensor& q, const Tensor& k, const Tensor& v, const Problem& p, bool need_weights) {
  Tensor w = standard_weights(q, k, allowed_mask(p), p.scale, p.additive);
  Tensor out = matmul(w, v);
  return {out, need_weights ? w : Tensor()};
}

// The standard path's gradient written with kiln ops (for create_graph through
// the flash path): P the weights, dV = P^T g, dP = g V^T,
// dS = P * (dP - rowsum(dP * P)), dQ = scale dS K, dK = scale dS^T Q.
Grads composed_grads(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Problem& p) {
  Tensor P = standard_weights(q, k, allowed_mask(p), p.scale);
  Tensor dP = matmul(g, transpose(v, -2, -1));
  Tensor dS = mul(P, sub(dP, sum(mul(dP, P), {-1}, /*keepdim=*/true)));
  return {mul(matmul(dS, k), p.scale), mul(matmul(transpose(dS, -2, -1), q), p.scale),
          matmul(transpose(P, -2, -1), g)};
}

backend::cpu::AttentionShape kernel_shape(const Problem& p) {
  backend::cpu::AttentionShape s;
  s.B = p.B;
  s.H = p.H;
  s.Tq = p.Tq;
  s.Tk = p.Tk;
  s.Dh = p.Dh;
  s.Dv = p.Dv;
  s.scale = p.scale;
  s.causal = p.causal;
  if (p.mask.defined()) {
    NoGradGuard no_grad;
    s.mask = expand(p.mask, {p.B, p.H, p.Tq, p.Tk});  // stride 0 along broadcast dims, no copy
  }
  return s;
}

Tensor contiguous_untracked(const Tensor& t) {
  NoGradGuard no_grad;
  return contiguous(t);
}

// The kernels read [B, H, T, D] operands with any strides but a unit one along
// D: MultiheadAttention's heads (views of a [B, T, 3 * H * Dh] projection) go
// in without a copy.
Tensor unit_rows(const Tensor& t) {
  return t.size(3) <= 1 || t.strides()[3] == 1 ? t : contiguous_untracked(t);
}

// Whether t's heads are interleaved in its tokens ([B, T, H, D] memory viewed
// as [B, H, T, D], as split_heads makes them).
bool token_major(const Tensor& t) { return t.size(1) > 1 && t.size(2) > 1 && t.strides()[1] < t.strides()[2]; }

// A new [B, H, T, D] tensor laid out like `like`: token-major memory
// [B, T, H, D] viewed as [B, H, T, D] when `like` is token-major, so that
// merging the heads back (transpose(1, 2) + reshape to [B, T, H * D]) is a
// view; otherwise contiguous.
Tensor empty_heads(const Tensor& like, int64_t B, int64_t H, int64_t T, int64_t D) {
  if (!token_major(like)) return Tensor::empty({B, H, T, D}, like.dtype(), like.device());
  NoGradGuard no_grad;
  return transpose(Tensor::empty({B, T, H, D}, like.dtype(), like.device()), 1, 2);
}

// Whether q, k, v are the heads of one [B, T, 3 H Dh] projection split along
// its last dim (MultiheadAttention's self-attention): token-major views of one
// storage with strides [T 3C, Dh, 3C, 1], k starting where q's columns end
// and v where k's end (C = H Dh).
bool one_projection(const Tensor& q, const Tensor& k, const Tensor& v, const Problem& p) {
  const int64_t C = p.H * p.Dh;
  if (p.Tq != p.Tk || p.Dh != p.Dv || !token_major(q)) return false;
  const int64_t want[4] = {p.Tq * 3 * C, p.Dh, 3 * C, 1};
  for (const Tensor* t : {&q, &k, &v}) {
    if (!t->is_same_storage(q) || t->dtype() != q.dtype()) return false;
    for (size_t i = 0; i < 4; ++i)
      if (t->strides()[i] != want[i]) return false;
  }
  return k.storage_offset() == q.storage_offset() + C && v.storage_offset() == k.storage_offset() + C;
}

// Gradient tensors for q, k, v in their inputs' layouts: token-major heads
// flow back to the [B, T, H * Dh] projections as views. When all three are
// needed and q, k, v are one projection's heads, they are views of one
// [B, T, 3C] buffer laid out like it: split's vjp then joins them as a view
// instead of a cat copy.
std::array<Tensor, 3> grad_heads(const Tensor& q, const Tensor& k, const Tensor& v, const Problem& p, bool all) {
  if (all && one_projection(q, k, v, p)) {
    const int64_t C = p.H * p.Dh;
    Tensor g = Tensor::empty({p.B, p.Tq, 3 * C}, q.dtype(), q.device());
    return {Tensor::make_view(g.storage(), q.shape(), q.strides(), 0, q.dtype()),
            Tensor::make_view(g.storage(), k.shape(), k.strides(), C, k.dtype()),
            Tensor::make_view(g.storage(), v.shape(), v.strides(), 2 * C, v.dtype())};
  }
  return {empty_heads(q, p.B, p.H, p.Tq, p.Dh), empty_heads(k, p.B, p.H, p.Tk, p.Dh),
          empty_heads(v, p.B, p.H, p.Tk, p.Dv)};
}

// NOTE [Small attention path]: up to kSmallAttentionMaxKeys queries and keys
// with no mask of any kind and no weights asked for, Auto runs
// one fused kernel per (batch, head) (src/backend/cpu/attention/): scores,
// softmax and P V in L1, the probabilities [B, H, Tq, 64] saved for a fused
// backward. It beats both the standard path (separate batched products and
// softmax passes over [B, H, Tq, Tk] in memory) and the flash kernel (which
// recomputes the probabilities in its backward) at these sizes: the DiT's
// [64, 4, 49, 32] heads (docs/performance.md, "third pass: DiT"). bf16
// operands are read and written in bf16 and computed in f32.
bool small_applies(const Problem& p, const AttentionOptions& o) {
  constexpr int64_t kMax = backend::cpu::kSmallAttentionMaxKeys;
  return o.policy == AttentionBackend::Auto && !o.need_weights && !p.mask.defined() && !p.additive.defined() &&
         !p.causal && p.B > 0 && p.H > 0 && p.Tq >= 1 && p.Tq <= kMax && p.Tk >= 1 && p.Tk <= kMax && p.Dh >= 1 &&
         p.Dv >= 1;
}

AttentionResult small(const Tensor& q, const Tensor& k, const Tensor& v, const Problem& p) {
  const backend::cpu::SmallAttentionShape s{.B = p.B, .H = p.H, .Tq = p.Tq, .Tk = p.Tk, .Dh = p.Dh, .Dv = p.Dv,
                                            .scale = p.scale};
  Tensor out = empty_heads(q, p.B, p.H, p.Tq, p.Dv);
  // The compute dtype's probabilities: f64 for f64, else f32 (bf16 computes in f32).
  Tensor probs = Tensor::empty({p.B, p.H, p.Tq, backend::cpu::kSmallAttentionMaxKeys},
                               q.dtype() == kF64 ? kF64 : kF32, q.device());
  KILN_LAUNCH("small_attention_forward",
              backend::cpu::small_attention_forward(s, unit_rows(q), unit_rows(k), unit_rows(v), out, probs));
  if (needs_grad(q, k, v)) {
    record(kOp, {q, k, v}, {out}, {q, k, v, probs}, [s, p](const VjpArgs& a) -> Grads {
      const Tensor &q = a.saved[0], &k = a.saved[1], &v = a.saved[2];
      if (GradMode::is_enabled()) return composed_grads(q, k, v, a.grad(), p);  // create_graph, as flash
      auto [dq, dk, dv] = grad_heads(q, k, v, p, a.needs(0) && a.needs(1) && a.needs(2));
      KILN_LAUNCH("small_attention_backward",
                  backend::cpu::small_attention_backward(s, unit_rows(q), unit_rows(k), unit_rows(v), a.saved[3],
                                                         unit_rows(a.grad()), dq, dk, dv));
      return {a.needs(0) ? dq : Tensor(), a.needs(1) ? dk : Tensor(), a.needs(2) ? dv : Tensor()};
    });
  }
  return {out, Tensor()};
}

AttentionResult flash(const Tensor& q, const Tensor& k, const Tensor& v, const Problem& p) {
  const backend::cpu::AttentionShape s = kernel_shape(p);
  Tensor out = empty_heads(q, p.B, p.H, p.Tq, p.Dv);
  Tensor lse = Tensor::empty({p.B, p.H, p.Tq}, q.dtype(), q.device());  // +inf marks a fully masked row
  KILN_LAUNCH("flash_attention_forward", backend::cpu::flash_attention_forward(s, unit_rows(q), unit_rows(k), unit_rows(v), out, lse));
  if (needs_grad(q, k, v)) {
    // Saves q, k, v as given (double backward needs them in the graph), out and lse.
    record(kOp, {q, k, v}, {out}, {q, k, v, out, lse}, [s, p](const VjpArgs& a) -> Grads {
      const Tensor &q = a.saved[0], &k = a.saved[1], &v = a.saved[2];
      // create_graph: the fused backward is not differentiable; recompute the
      // standard path's gradient with kiln ops so it can be differentiated again.
      if (GradMode::is_enabled()) return composed_grads(q, k, v, a.grad(), p);
      auto [dq, dk, dv] = grad_heads(q, k, v, p, a.needs(0) && a.needs(1) && a.needs(2));
      const Tensor out = a.saved[3], g = a.grad(), lse = a.saved[4];
      KILN_LAUNCH("flash_attention_backward", backend::cpu::flash_attention_backward(s, unit_rows(q), unit_rows(k),
                                                                                     unit_rows(v), out, g, lse, dq, dk, dv));
      return {a.needs(0) ? dq : Tensor(), a.needs(1) ? dk : Tensor(), a.needs(2) ? dv : Tensor()};
    });
  }
  return {out, Tensor()};
}

}  // namespace

AttentionResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const AttentionOptions& options) {
  const Problem p = check(q, k, v, options);
  if (small_applies(p, options)) return small(q, k, v, p);
  if (q.dtype() == kBF16) {  // compute in f32; `to` carries the gradients back to bf16
    AttentionOptions o32 = options;
    if (o32.additive_mask.defined()) o32.additive_mask = to(o32.additive_mask, kF32);
    AttentionResult r = scaled_dot_product_attention(to(q, kF32), to(k, kF32), to(v, kF32), o32);
    return {to(r.out, kBF16), r.weights.defined() ? to(r.weights, kBF16) : Tensor()};
  }
  const bool use_flash = options.policy == AttentionBackend::Flash ||
                         (options.policy == AttentionBackend::Auto && !options.need_weights &&
                          !options.additive_mask.defined());
  return use_flash ? flash(q, k, v, p) : standard(q, k, v, p, options.need_weights);
}

Tensor causal_mask(int64_t T) {
  KILN_CHECK(T >= 0, "causal_mask", "size must be >= 0, got {}", T);
  return causal_mask(T, T);
}

Tensor causal_mask(int64_t Tq, int64_t Tk) {
  KILN_CHECK(Tq >= 0 && Tk >= 0, "causal_mask", "sizes must be >= 0, got Tq {} and Tk {}", Tq, Tk);
  Tensor m = Tensor::empty({1, 1, Tq, Tk}, kBool);
  KILN_LAUNCH("causal_mask", bool* d = m.data<bool>(); for (int64_t i = 0; i < Tq; ++i) for (int64_t j = 0; j < Tk; ++j)
                                 d[i * Tk + j] = j <= i + (Tk - Tq));
  return m;
}

Tensor padding_mask(const Tensor& valid) {
  check_defined("padding_mask", valid, "valid");
  KILN_CHECK(valid.dtype() == kBool && valid.dim() == 2, "padding_mask",
             "valid must be a bool [B, T] tensor (true = a real token), got {} {}", to_string(valid.shape()),
             name(valid.dtype()));
  return reshape(valid, {valid.size(0), 1, 1, valid.size(1)});
}

}  // namespace kiln
