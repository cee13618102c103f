// Small-sequence attention (at most 64 queries and keys), compiled once per
// kernel ISA (NOTE [Per-ISA kernels] in CMakeLists.txt); the reference is
// ../small_attention_ref.cpp. Letter legend: B batch, H heads, Tq queries,
// Tk keys, Dh query/key dim, Dv value dim; W vector lanes; kP = 64, the keys
// padded; Dhp, Dvp the head dims rounded up to W.
//
// NOTE [Small attention]: one task per (b, h) packs its operands into
// contiguous buffers in the compute dtype A (f32, or f64 for f64 inputs),
// zero padded to whole vectors: K transposed and scaled ([Dhp, kP]), so that
// the scores of a query row are kP / W vectors; then every product is one
// register-tiled GEMM on buffers that fit L1 (a [49, 49] head at Dh 32 is
// about 50 KB of f32 in all). The probabilities P [Tq, kP] are written
// straight into the saved tensor and the softmax runs in place there; the
// backward reads them back instead of recomputing exp, and uses
// rowsum(P * dP) (no need for the output). Against the standard path (two
// batched products, a softmax, and their backward as separate passes over
// [B, H, 49, 49] in memory, plus copies of the strided heads) this keeps
// each head's work in one place.
#include "src/backend/cpu/attention/isa/small_attention.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/core/parallel.h"
#include "src/backend/cpu/block_gemm.h"
#include "src/backend/cpu/vec_math.h"

namespace kiln::backend::cpu::KILN_ISA_NS {

namespace {

constexpr int64_t kP = kSmallAttentionMaxKeys;

// Vec, padded and the register-tiled product: backend/cpu/block_gemm.h.
using block::Vec;
static_assert(kP % Vec<float>::W == 0 && kP % Vec<double>::W == 0);

// Reads and writes one (b, h) head of a [B, H, T, D] tensor of T with a unit
// last stride.
template <class T>
struct Head {
  T* base;
  int64_t sb, sh, st;
  explicit Head(const Tensor& t)
      : base(static_cast<T*>(t.data_ptr())), sb(t.strides()[0]), sh(t.strides()[1]), st(t.strides()[2]) {}
  T* row(int64_t b, int64_t h, int64_t i) const { return base + b * sb + h * sh + i * st; }
};

// Prefetches rows [r0, r1) of d elements of head (b, h) (the next task's
// head: its rows are 128-byte pieces strided by the projection's width, which
// the hardware prefetcher does not follow well). The kernels spread these over
// the current head's softmax rows, a few lines at a time: issued all at once
// (~300 lines a head) most were dropped, and the packing loads still missed
// cache for a third of the kernels' time.
template <class T>
void prefetch_rows(const Head<T>& src, int64_t b, int64_t h, int64_t r0, int64_t r1, int64_t d) {
  const int64_t bytes = d * int64_t(sizeof(T));
  for (int64_t r = r0; r < r1; ++r) {
    const char* row = reinterpret_cast<const char*>(src.row(b, h, r));
    for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(row + o);
  }
}

// n rows of d elements of head (b, h) into dst [n, dp] (zero padded), times mul.
template <class T, class A>
void pack(const Head<T>& src, int64_t b, int64_t h, int64_t n, int64_t d, int64_t dp, A mul, A* dst) {
  for (int64_t r = 0; r < n; ++r) {
    const T* s = src.row(b, h, r);
    A* o = dst + r * dp;
    for (int64_t c = 0; c < d; ++c) o[c] = A(s[c]) * mul;
    for (int64_t c = d; c < dp; ++c) o[c] = A(0);
  }
}

// Horizontal reductions of kP values, in vectors: without -ffast-math a
// plain loop's reduction stays a chain of scalar adds (about 64 x 3 cycles a row).
//
// max_j x[j] over j < n (of kP values), the rest masked in registers: the
// softmax used to write -inf into the padding with scalar stores and read the
// row back as vectors, a store-forwarding stall per row (a tenth of the
// forward's own time).
template <class A>
A row_max_n(const A* x, int64_t n) {
  using V = typename Vec<A>::type;
  using I = typename block::Lanes<A>::type;
  constexpr int64_t W = Vec<A>::W;
  I lane;
  for (int64_t l = 0; l < W; ++l) lane[l] = typename block::Lanes<A>::elem(l);
  const V ninf = V{} - std::numeric_limits<A>::infinity();
  V m = ninf;
  for (int64_t j = 0; j < kP; j += W) {
    V v;
    std::memcpy(&v, x + j, sizeof(V));
    v = lane < typename block::Lanes<A>::elem(n - j) ? v : ninf;
    m = m > v ? m : v;
  }
  A r = m[0];
  for (int64_t l = 1; l < W; ++l) r = std::max(r, A(m[l]));
  return r;
}

// sum_j x[j] * y[j] over kP values (y = nullptr: sum_j x[j]).
template <class A>
A row_dot(const A* x, const A* y) {
  using V = typename Vec<A>::type;
  constexpr int64_t W = Vec<A>::W;
  V acc[2] = {V{}, V{}};
  for (int64_t j = 0; j < kP; j += W) {
    V a, b;
    std::memcpy(&a, x + j, sizeof(V));
    if (y) {
      std::memcpy(&b, y + j, sizeof(V));
      a *= b;
    }
    acc[(j / W) & 1] += a;
  }
  const V t = acc[0] + acc[1];
  A r = 0;
  for (int64_t l = 0; l < W; ++l) r += t[l];
  return r;
}

// src [n, dp] (first d columns) into head (b, h), rounded to T.
template <class T, class A>
void unpack(const A* src, int64_t n, int64_t d, int64_t dp, const Head<T>& dst, int64_t b, int64_t h) {
  for (int64_t r = 0; r < n; ++r) {
    T* o = dst.row(b, h, r);
    const A* s = src + r * dp;
    for (int64_t c = 0; c < d; ++c) o[c] = T(s[c]);
  }
}

// (b, h) pairs per parallel task: each is ~0.3 MFLOP at the DiT's size.
constexpr int64_t kGrain = 8;

template <class T>
void forward(const SmallAttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
             const Tensor& probs) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const Head<T> Q(q), K(k), V(v), O(out);
  A* P = static_cast<A*>(probs.data_ptr());
  const int64_t Tq = s.Tq, Tk = s.Tk, Dhp = block::padded<A>(s.Dh), Dvp = block::padded<A>(s.Dv);
  parallel_for(0, s.B * s.H, kGrain, [&](int64_t lo, int64_t hi) {
    std::vector<A> buf(size_t(Tq * Dhp + Tk * Dhp + Dhp * kP + kP * Dvp + Tq * Dvp));
    A *qf = buf.data(), *kf = qf + Tq * Dhp, *kt = kf + Tk * Dhp, *vf = kt + Dhp * kP, *of = vf + kP * Dvp;
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t b = bh / s.H, h = bh % s.H;
      const bool next = bh + 1 < hi;  // the next head's rows, prefetched row by row below
      const int64_t nb = (bh + 1) / s.H, nh = (bh + 1) % s.H;
      pack(Q, b, h, Tq, s.Dh, Dhp, A(1), qf);
      pack(K, b, h, Tk, s.Dh, Dhp, A(s.scale), kf);
      block::transpose(kf, Dhp, Tk, Dhp, kt, kP);  // K^T scaled [Dhp, kP]; 0 past Tk from buf's start
      pack(V, b, h, Tk, s.Dv, Dvp, A(1), vf);
      A* p = P + bh * Tq * kP;
      block::gemm_wide<A>(Tq, kP, Dhp, qf, Dhp, 1, kt, kP, p, kP);  // scores [Tq, kP]
      for (int64_t i = 0; i < Tq; ++i) {  // softmax over the Tk keys, 0 past them
        if (next) {
          prefetch_rows(Q, nb, nh, i, i + 1, s.Dh);
          if (i < Tk) prefetch_rows(K, nb, nh, i, i + 1, s.Dh);
          if (i < Tk) prefetch_rows(V, nb, nh, i, i + 1, s.Dv);
        }
        A* row = p + i * kP;  // whole-vector loops only: masked, no scalar stores into the padding
        const A m = row_max_n(row, Tk);
        for (int64_t j = 0; j < kP; ++j) row[j] = j < Tk ? vexp<A>(row[j] - m) : A(0);
        const A inv = A(1) / row_dot<A>(row, nullptr);
        for (int64_t j = 0; j < kP; ++j) row[j] *= inv;
      }
      if (next && Tk > Tq) {
        prefetch_rows(K, nb, nh, Tq, Tk, s.Dh);
        prefetch_rows(V, nb, nh, Tq, Tk, s.Dv);
      }
      block::gemm_wide<A>(Tq, Dvp, Tk, p, kP, 1, vf, Dvp, of, Dvp);  // P V [Tq, Dvp]
      unpack(of, Tq, s.Dv, Dvp, O, b, h);
    }
  });
}

template <class T>
void backward(const SmallAttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
              const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const Head<T> Q(q), K(k), V(v), G(dout), DQ(dq), DK(dk), DV(dv);
  const A* P = static_cast<const A*>(probs.data_ptr());
  const int64_t Tq = s.Tq, Tk = s.Tk, Dhp = block::padded<A>(s.Dh), Dvp = block::padded<A>(s.Dv);
  const A scale = A(s.scale);
  parallel_for(0, s.B * s.H, kGrain, [&](int64_t lo, int64_t hi) {
    std::vector<A> buf(
        size_t(Tq * Dhp + Tk * Dhp + Tk * Dvp + Dvp * kP + Tq * Dvp + Tq * kP + Tq * Dhp + Tk * Dhp + Tk * Dvp));
    A *qf = buf.data(), *kf = qf + Tq * Dhp, *vf = kf + Tk * Dhp, *vt = vf + Tk * Dvp, *gf = vt + Dvp * kP,
      *ds = gf + Tq * Dvp, *gq = ds + Tq * kP, *gk = gq + Tq * Dhp, *gv = gk + Tk * Dhp;
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t b = bh / s.H, h = bh % s.H;
      const bool next = bh + 1 < hi;  // the next head's rows, prefetched row by row below
      const int64_t nb = (bh + 1) / s.H, nh = (bh + 1) % s.H;
      pack(Q, b, h, Tq, s.Dh, Dhp, A(1), qf);
      pack(K, b, h, Tk, s.Dh, Dhp, A(1), kf);
      pack(V, b, h, Tk, s.Dv, Dvp, A(1), vf);
      block::transpose(vf, Dvp, Tk, Dvp, vt, kP);  // V^T [Dvp, kP]; 0 past Tk from buf's start
      pack(G, b, h, Tq, s.Dv, Dvp, A(1), gf);
      const A* p = P + bh * Tq * kP;
      block::gemm_wide<A>(Tq, kP, Dvp, gf, Dvp, 1, vt, kP, ds, kP);  // dP = dout V^T [Tq, kP]
      for (int64_t i = 0; i < Tq; ++i) {  // dS = scale P (dP - rowsum(P dP)); 0 past Tk as P is
        if (next) {
          prefetch_rows(Q, nb, nh, i, i + 1, s.Dh);
          prefetch_rows(G, nb, nh, i, i + 1, s.Dv);
          if (i < Tk) prefetch_rows(K, nb, nh, i, i + 1, s.Dh);
          if (i < Tk) prefetch_rows(V, nb, nh, i, i + 1, s.Dv);
        }
        const A* pr = p + i * kP;
        A* dr = ds + i * kP;
        const A delta = row_dot(pr, dr);
        for (int64_t j = 0; j < kP; ++j) dr[j] = scale * pr[j] * (dr[j] - delta);
      }
      if (next && Tk > Tq) {
        prefetch_rows(K, nb, nh, Tq, Tk, s.Dh);
        prefetch_rows(V, nb, nh, Tq, Tk, s.Dv);
      }
      block::gemm_wide<A>(Tq, Dhp, Tk, ds, kP, 1, kf, Dhp, gq, Dhp);  // dQ = dS K
      block::gemm_wide<A>(Tk, Dhp, Tq, ds, 1, kP, qf, Dhp, gk, Dhp);  // dK = dS^T Q
      block::gemm_wide<A>(Tk, Dvp, Tq, p, 1, kP, gf, Dvp, gv, Dvp);   // dV = P^T dout
      unpack(gq, Tq, s.Dh, Dhp, DQ, b, h);
      unpack(gk, Tk, s.Dh, Dhp, DK, b, h);
      unpack(gv, Tk, s.Dv, Dvp, DV, b, h);
    }
  });
}

template <class Fn>
void by_dtype(DType t, Fn&& fn) {
  if (t == kF32) fn(type_tag<float>{});
  else if (t == kF64) fn(type_tag<double>{});
  else fn(type_tag<bfloat16>{});
}

}  // namespace

void small_attention_forward(const SmallAttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& probs) {
  by_dtype(q.dtype(), [&](auto tag) { forward<typename decltype(tag)::type>(s, q, k, v, out, probs); });
}

void small_attention_backward(const SmallAttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& probs, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                              const Tensor& dv) {
  by_dtype(q.dtype(), [&](auto tag) {
    backward<typename decltype(tag)::type>(s, q, k, v, probs, dout, dq, dk, dv);
  });
}

}  // namespace kiln::backend::cpu::KILN_ISA_NS
