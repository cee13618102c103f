// CPU resize kernels: separable nearest / (bi)linear interpolation of planes
// through per-axis tables, its adjoint, and the plain ref:: loops. Planes are
// independent, so every kernel runs parallel over planes. A linear vertical
// pass blends two input rows into a row buffer (contiguous, vectorizes), then
// the horizontal pass gathers from it; nearest rows that repeat the previous
// source row are copied.
#include "src/ops/cpu/resize.h"

#include <cstring>
#include <type_traits>

#include "kiln/core/parallel.h"

namespace kiln::cpu {

namespace {

// Planes per parallel task: about 32K elements of output each.
int64_t plane_grain(int64_t plane) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(plane, 1)); }

// out[ow] = the horizontal interpolation of the source row src [W].
template <class T, class A, class S>
void row_forward(const ResizeAxis& w, const S* src, T* out) {
  const int64_t OW = w.out();
  const int64_t* i0 = w.i0<A>();
  const int64_t* i1 = w.i1<A>();
  if (w.nearest) {
    for (int64_t ow = 0; ow < OW; ++ow) out[ow] = T(src[i0[ow]]);
  } else {
    const A* l0 = w.l0<A>();
    const A* l1 = w.l1<A>();
#pragma omp simd
    for (int64_t ow = 0; ow < OW; ++ow) out[ow] = T(l0[ow] * A(src[i0[ow]]) + l1[ow] * A(src[i1[ow]]));
  }
}

// acc[W] += the horizontal adjoint of the gradient row gy [OW], times s.
template <class T, class A>
void row_backward(const ResizeAxis& w, const T* gy, A* acc) {
  const int64_t OW = w.out();
  const int64_t* i0 = w.i0<A>();
  const int64_t* i1 = w.i1<A>();
  if (w.nearest) {
    for (int64_t ow = 0; ow < OW; ++ow) acc[i0[ow]] += A(gy[ow]);
  } else {
    const A* l0 = w.l0<A>();
    const A* l1 = w.l1<A>();
    for (int64_t ow = 0; ow < OW; ++ow) {  // taps of neighbouring outputs overlap: no simd
      const A v = A(gy[ow]);
      acc[i0[ow]] += l0[ow] * v;
      acc[i1[ow]] += l1[ow] * v;
    }
  }
}

}  // namespace

void resize2d(const ResizeGeom& g, const Tensor& x_in, const Tensor& out) {
  if (out.numel() == 0) return;
  Tensor x = x_in.contiguous();
  const int64_t OH = g.h.out(), OW = g.w.out();
  dispatch_floating(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    const int64_t* h0 = g.h.i0<A>();
    const int64_t* h1 = g.h.i1<A>();
    const A* hl0 = g.h.l0<A>();
    const A* hl1 = g.h.l1<A>();
    parallel_for(0, g.N, plane_grain(OH * OW), [&](int64_t lo, int64_t hi) {
      std::vector<A> tmp(g.h.nearest ? 0 : size_t(g.W));  // the vertical blend of two rows
      for (int64_t n = lo; n < hi; ++n) {
        const T* plane = xp + n * g.H * g.W;
        T* orow = op + n * OH * OW;
        for (int64_t oh = 0; oh < OH; ++oh, orow += OW) {
          if (g.h.nearest) {
            if (oh > 0 && h0[oh] == h0[oh - 1]) {
              std::memcpy(orow, orow - OW, size_t(OW) * sizeof(T));  // upsampling repeats rows
              continue;
            }
            row_forward<T, A>(g.w, plane + h0[oh] * g.W, orow);
          } else {
            const T* r0 = plane + h0[oh] * g.W;
            const T* r1 = plane + h1[oh] * g.W;
            const A l0 = hl0[oh], l1 = hl1[oh];
            A* t = tmp.data();
#pragma omp simd
            for (int64_t w = 0; w < g.W; ++w) t[w] = l0 * A(r0[w]) + l1 * A(r1[w]);
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
  const int64_t OH = g.h.out(), OW = g.w.out(), plane = g.H * g.W;
  dispatch_floating(grad_in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    constexpr bool direct = std::is_same_v<T, A>;  // f32/f64 accumulate in grad_in; bf16 in an f32 plane
    const T* gp = static_cast<const T*>(go.data_ptr());
    T* xp = static_cast<T*>(grad_in.data_ptr());
    const int64_t* h0 = g.h.i0<A>();
    const int64_t* h1 = g.h.i1<A>();
    const A* hl0 = g.h.l0<A>();
    const A* hl1 = g.h.l1<A>();
    parallel_for(0, g.N, plane_grain(std::max(plane, OH * OW)), [&](int64_t lo, int64_t hi) {
      std::vector<A> buf(direct ? 0 : size_t(plane));
      std::vector<A> tmp(g.h.nearest ? 0 : size_t(g.W));  // horizontal adjoint of one gradient row
      for (int64_t n = lo; n < hi; ++n) {
        A* acc;
        if constexpr (direct)
          acc = xp + n * plane;
        else
          acc = buf.data();
        std::fill(acc, acc + plane, A(0));
        const T* gy = gp + n * OH * OW;
        for (int64_t oh = 0; oh < OH; ++oh, gy += OW) {
          if (g.h.nearest) {
            row_backward<T, A>(g.w, gy, acc + h0[oh] * g.W);
          } else {
            A* t = tmp.data();
            std::fill(t, t + g.W, A(0));
            row_backward<T, A>(g.w, gy, t);
            A* r0 = acc + h0[oh] * g.W;
            A* r1 = acc + h1[oh] * g.W;
            const A l0 = hl0[oh], l1 = hl1[oh];
            // r0 and r1 may be the same row (the last one): two passes, not one fused loop.
#pragma omp simd
            for (int64_t w = 0; w < g.W; ++w) r0[w] += l0 * t[w];
#pragma omp simd
            for (int64_t w = 0; w < g.W; ++w) r1[w] += l1 * t[w];
          }
        }
        if constexpr (!direct) {
          T* gx = xp + n * plane;
          for (int64_t i = 0; i < plane; ++i) gx[i] = T(acc[i]);
        }
      }
    });
  });
}

namespace ref {

namespace {

// The taps and weights of output o along one axis, from the formulas.
template <class A>
void taps(bool linear, int64_t o, int64_t in, int64_t out, bool align, double scale, int64_t i[2], double l[2]) {
  if (!linear) {
    i[0] = i[1] = nearest_source(o, in, out, scale), l[0] = 1, l[1] = 0;
    return;
  }
  A l0, l1;
  linear_source<A>(o, in, out, align, scale, i[0], i[1], l0, l1);
  l[0] = double(l0), l[1] = double(l1);
}

}  // namespace

void interpolate(const Tensor& x_in, const Tensor& out, bool linear, bool align, double scale_h, double scale_w) {
  Tensor x = x_in.contiguous();
  const int64_t N = x.shape()[0], H = x.shape()[1], W = x.shape()[2], OH = out.shape()[1], OW = out.shape()[2];
  dispatch_floating(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          int64_t ih[2], iw[2];
          double lh[2], lw[2];
          taps<A>(linear, oh, H, OH, align, scale_h, ih, lh);
          taps<A>(linear, ow, W, OW, align, scale_w, iw, lw);
          double s = 0;
          for (int a = 0; a < 2; ++a)
            for (int b = 0; b < 2; ++b) s += lh[a] * lw[b] * double(xp[(n * H + ih[a]) * W + iw[b]]);
          op[(n * OH + oh) * OW + ow] = T(s);
        }
  });
}

void interpolate_backward(const Tensor& grad_out, const Tensor& grad_in, bool linear, bool align, double scale_h,
                          double scale_w) {
  Tensor go = grad_out.contiguous();
  const int64_t N = grad_in.shape()[0], H = grad_in.shape()[1], W = grad_in.shape()[2];
  const int64_t OH = go.shape()[1], OW = go.shape()[2];
  dispatch_floating(go.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* gp = static_cast<const T*>(go.data_ptr());
    T* xp = static_cast<T*>(grad_in.data_ptr());
    std::vector<double> acc(size_t(N * H * W), 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          int64_t ih[2], iw[2];
          double lh[2], lw[2];
          taps<A>(linear, oh, H, OH, align, scale_h, ih, lh);
          taps<A>(linear, ow, W, OW, align, scale_w, iw, lw);
          const double v = double(gp[(n * OH + oh) * OW + ow]);
          for (int a = 0; a < 2; ++a)
            for (int b = 0; b < 2; ++b) acc[size_t((n * H + ih[a]) * W + iw[b])] += lh[a] * lw[b] * v;
        }
    for (size_t i = 0; i < acc.size(); ++i) xp[i] = T(acc[i]);
  });
}

}  // namespace ref

}  // namespace kiln::cpu
