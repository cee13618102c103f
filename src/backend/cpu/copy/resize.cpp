// CPU resize kernels: separable nearest / (bi)linear interpolation of planes
// through per-axis tables, its adjoint, and the plain ref:: loops. Planes are
// independent, so every kernel runs parallel over planes. Horizontal taps are
// gathers (int32 indices, 16 lanes), the costly part, so the forward gathers
// each input row once when upsampling (nearest: repeated rows are copied) and
// the backward, in gather form, sums the gradient rows that read an input row
// (contiguous, vectorizes) before one horizontal adjoint per input row.
#include "src/backend/cpu/copy/resize.h"

#include <cstring>
#include <type_traits>

#include "kiln/core/parallel.h"
#include "src/backend/cpu/dispatch.h"

namespace kiln::backend::cpu {

namespace {

// Planes per parallel task: about 32K elements of output each.
int64_t plane_grain(int64_t plane) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(plane, 1)); }

// out[ow] = the horizontal interpolation of the source row src [W].
template <class T, class A, class S>
void row_forward(const ResizeAxis& w, const S* src, T* out) {
  const int64_t OW = w.out();
  const int32_t* i0 = w.i0<A>();
  const int32_t* i1 = w.i1<A>();
  if (w.nearest) {
    for (int64_t ow = 0; ow < OW; ++ow) out[ow] = T(src[i0[ow]]);
  } else {
    const A* l0 = w.l0<A>();
    const A* l1 = w.l1<A>();
#pragma omp simd
    for (int64_t ow = 0; ow < OW; ++ow) out[ow] = T(l0[ow] * A(src[i0[ow]]) + l1[ow] * A(src[i1[ow]]));
  }
}

// t[W] = the horizontal adjoint of the gradient row gy [OW].
template <class S, class A>
void row_backward(const ResizeAxis& w, int64_t W, const S* gy, A* t) {
  const AxisAdjoint<A>& adj = w.adjoint<A>();
  std::fill(t, t + W, A(0));
  for (int64_t k = 0; k < adj.fan; ++k) {
    const int32_t* idx = adj.idx.data() + k * W;
    const A* wt = adj.w.data() + k * W;
    // Padding has weight 0 and must add nothing, even against an inf gradient.
#pragma omp simd
    for (int64_t i = 0; i < W; ++i) t[i] += wt[i] != A(0) ? wt[i] * A(gy[idx[i]]) : A(0);
  }
}

}  // namespace

void resize2d(const ResizeGeom& g, const Tensor& x_in, const Tensor& out) {
  if (out.numel() == 0) return;
  Tensor x = x_in.contiguous();
  const int64_t OH = g.h.out(), OW = g.w.out(), W = g.W;
  // Linear rows when upsampling: interpolate each input row horizontally
  // once (the gathers are the cost) and blend two such rows per output row;
  // when downsampling, blend two input rows first, then gather once per
  // output row.
  const bool rows_first = !g.h.nearest && OH >= g.H;
  dispatch_only<bfloat16, float, double>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    const int32_t* h0 = g.h.i0<A>();
    const int32_t* h1 = g.h.i1<A>();
    const A* hl0 = g.h.l0<A>();
    const A* hl1 = g.h.l1<A>();
    parallel_for(0, g.N, plane_grain(OH * OW), [&](int64_t lo, int64_t hi) {
      // rows_first: two horizontally interpolated input rows [2, OW] and the
      // input row each holds; otherwise the vertical blend of two rows [W].
      std::vector<A> tmp(g.h.nearest ? 0 : rows_first ? size_t(2 * OW) : size_t(W));
      for (int64_t n = lo; n < hi; ++n) {
        const T* plane = xp + n * g.H * W;
        T* orow = op + n * OH * OW;
        int64_t held[2] = {-1, -1};
        // The horizontally interpolated input row h, computed at most once
        // per plane (taps only move forward), kept in a slot `keep` does not use.
        auto row = [&](int64_t h, const A* keep) -> const A* {
          for (int s = 0; s < 2; ++s)
            if (held[s] == h) return tmp.data() + s * OW;
          const int s = keep == tmp.data() ? 1 : 0;
          held[s] = h;
          row_forward<A, A>(g.w, plane + h * W, tmp.data() + s * OW);
          return tmp.data() + s * OW;
        };
        for (int64_t oh = 0; oh < OH; ++oh, orow += OW) {
          if (g.h.nearest) {
            if (oh > 0 && h0[oh] == h0[oh - 1]) {
              std::memcpy(orow, orow - OW, size_t(OW) * sizeof(T));  // upsampling repeats rows
              continue;
            }
            row_forward<T, A>(g.w, plane + h0[oh] * W, orow);
          } else if (rows_first) {
            const A* r0 = row(h0[oh], nullptr);
            const A* r1 = row(h1[oh], r0);
            const A l0 = hl0[oh], l1 = hl1[oh];
#pragma omp simd
            for (int64_t w = 0; w < OW; ++w) orow[w] = T(l0 * r0[w] + l1 * r1[w]);
          } else {
            const T* r0 = plane + h0[oh] * W;
            const T* r1 = plane + h1[oh] * W;
            const A l0 = hl0[oh], l1 = hl1[oh];
            A* t = tmp.data();
#pragma omp simd
            for (int64_t w = 0; w < W; ++w) t[w] = l0 * A(r0[w]) + l1 * A(r1[w]);
            row_forward<T, A>(g.w, t, orow);
          }
        }
      }
    });
  });
}

void resize2d_backward(const ResizeGeom& g, const Tensor& grad_out, const Tensor& grad_in) {
  if (grad_in.numel() == 0) return;
  Tensor go = grad_out.contiguous();
  const int64_t OH = g.h.out(), OW = g.w.out(), H = g.H, W = g.W;
  dispatch_only<bfloat16, float, double>(grad_in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* gp = static_cast<const T*>(go.data_ptr());
    T* xp = static_cast<T*>(grad_in.data_ptr());
    const AxisAdjoint<A>& adj = g.h.adjoint<A>();
    // Input row h gathers the gradient rows that read it (contiguous, weighted
    // sums of output rows), then one horizontal adjoint: each input row is
    // written once, nothing is zero-filled or scattered.
    parallel_for(0, g.N, plane_grain(std::max(H * W, OH * OW)), [&](int64_t lo, int64_t hi) {
      std::vector<A> rows(static_cast<size_t>(OW)), tmp(static_cast<size_t>(W));
      for (int64_t n = lo; n < hi; ++n) {
        const T* gy = gp + n * OH * OW;
        for (int64_t h = 0; h < H; ++h) {
          A* r = rows.data();
          std::fill(r, r + OW, A(0));
          for (int64_t k = 0; k < adj.fan; ++k) {
            const A wt = adj.w[size_t(k * H + h)];
            if (wt == A(0)) continue;  // padding (and zero weights) add nothing
            const T* src = gy + int64_t(adj.idx[size_t(k * H + h)]) * OW;
#pragma omp simd
            for (int64_t w = 0; w < OW; ++w) r[w] += wt * A(src[w]);
          }
          T* gx = xp + (n * H + h) * W;
          if constexpr (std::is_same_v<T, A>) {
            row_backward(g.w, W, static_cast<const A*>(r), gx);
          } else {
            row_backward(g.w, W, static_cast<const A*>(r), tmp.data());
            for (int64_t w = 0; w < W; ++w) gx[w] = T(tmp[size_t(w)]);
          }
        }
      }
    });
  });
}

}  // namespace kiln::backend::cpu
