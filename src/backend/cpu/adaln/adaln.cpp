// adaLN modulate and gated residual kernels (adaln.h). One task per batch
// row b: its T token rows and its [D] operands, so the sums over T need no
// atomics. Accumulation in A = f64 for f64, else f32.
#include "src/backend/cpu/adaln/adaln.h"

#include <cmath>
#include <type_traits>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/core/parallel.h"

namespace kiln::backend::cpu {

namespace {

template <class T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class Fn>
void by_dtype(DType t, Fn&& fn) {
  if (t == kF32) fn(type_tag<float>{});
  else if (t == kF64) fn(type_tag<double>{});
  else fn(type_tag<bfloat16>{});
}

template <class T>
T* ptr(const Tensor& t) { return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr; }

// Row b of a [B, D] operand (unit last stride).
template <class T>
const T* row(const Tensor& t, int64_t b) { return ptr<T>(t) + b * t.strides()[0]; }

// sum_d x[d] * (y ? y[d] : 1) over n values, in 16 partial sums: a plain
// loop's reduction stays one chain of scalar adds without -ffast-math.
// The two cases are separate loops: with the choice made per element the
// loop ran slower (row_dot was ~1.3% of the DiT step on its own; measured in
// docs/performance.md, "Fourth pass: DiT").
template <class A>
A row_dot(const A* x, const A* y, int64_t n) {
  A acc[16] = {};
  int64_t d = 0;
  if (y)
    for (; d + 16 <= n; d += 16)
      for (int l = 0; l < 16; ++l) acc[l] += x[d + l] * y[d + l];
  else
    for (; d + 16 <= n; d += 16)
      for (int l = 0; l < 16; ++l) acc[l] += x[d + l];
  A s = 0;
  for (int l = 0; l < 16; ++l) s += acc[l];
  for (; d < n; ++d) s += x[d] * (y ? y[d] : A(1));
  return s;
}

// Token-rows per task grain: about 32K elements.
int64_t grain(int64_t T, int64_t D) { return std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(1, T * D)); }

}  // namespace

void adaln_modulate_forward(const Tensor& x, const Tensor& shift, const Tensor& scale, const Tensor& out) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2);
  by_dtype(x.dtype(), [&](auto tag) {
    using E = typename decltype(tag)::type;
    using A = Acc<E>;
    const E* xp = ptr<E>(x);
    E* op = ptr<E>(out);
    parallel_for(0, B, grain(T, D), [&](int64_t lo, int64_t hi) {
      std::vector<A> s1(static_cast<size_t>(D)), sh(static_cast<size_t>(D));
      for (int64_t b = lo; b < hi; ++b) {
        const E *sc = row<E>(scale, b), *sf = row<E>(shift, b);
        for (int64_t d = 0; d < D; ++d) {
          s1[size_t(d)] = A(1) + A(sc[d]);
          sh[size_t(d)] = A(sf[d]);
        }
        for (int64_t t = 0; t < T; ++t) {
          const E* xr = xp + (b * T + t) * D;
          E* o = op + (b * T + t) * D;
          for (int64_t d = 0; d < D; ++d) o[d] = E(A(xr[d]) * s1[size_t(d)] + sh[size_t(d)]);
        }
      }
    });
  });
}

void adaln_modulate_backward(const Tensor& g, const Tensor& x, const Tensor& scale, const Tensor& dx,
                             const Tensor& dshift, const Tensor& dscale) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2);
  by_dtype(x.dtype(), [&](auto tag) {
    using E = typename decltype(tag)::type;
    using A = Acc<E>;
    const E *gp = ptr<E>(g), *xp = ptr<E>(x);
    E *dxp = ptr<E>(dx), *dshp = ptr<E>(dshift), *dscp = ptr<E>(dscale);
    parallel_for(0, B, grain(T, D), [&](int64_t lo, int64_t hi) {
      std::vector<A> s1(static_cast<size_t>(D)), gs(static_cast<size_t>(D)), gx(static_cast<size_t>(D));
      for (int64_t b = lo; b < hi; ++b) {
        const E* sc = row<E>(scale, b);
        for (int64_t d = 0; d < D; ++d) {
          s1[size_t(d)] = A(1) + A(sc[d]);
          gs[size_t(d)] = 0;
          gx[size_t(d)] = 0;
        }
        for (int64_t t = 0; t < T; ++t) {
          const E *gr = gp + (b * T + t) * D, *xr = xp + (b * T + t) * D;
          if (dxp) {
            E* o = dxp + (b * T + t) * D;
            for (int64_t d = 0; d < D; ++d) o[d] = E(A(gr[d]) * s1[size_t(d)]);
          }
          for (int64_t d = 0; d < D; ++d) {
            gs[size_t(d)] += A(gr[d]);
            gx[size_t(d)] += A(gr[d]) * A(xr[d]);
          }
        }
        for (int64_t d = 0; d < D; ++d) {
          if (dshp) dshp[b * D + d] = E(gs[size_t(d)]);
          if (dscp) dscp[b * D + d] = E(gx[size_t(d)]);
        }
      }
    });
  });
}

void layer_norm_modulate_forward(const Tensor& x, const Tensor& shift, const Tensor& scale, double eps,
                                 const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2);
  by_dtype(x.dtype(), [&](auto tag) {
    using E = typename decltype(tag)::type;
    using A = Acc<E>;
    const E* xp = ptr<E>(x);
    E* op = ptr<E>(out);
    A *mp = ptr<A>(mean), *rp = ptr<A>(rstd);
    parallel_for(0, B, grain(T, D), [&](int64_t lo, int64_t hi) {
      std::vector<A> s1(static_cast<size_t>(D)), sh(static_cast<size_t>(D)), xr(static_cast<size_t>(D));
      for (int64_t b = lo; b < hi; ++b) {
        const E *sc = row<E>(scale, b), *sf = row<E>(shift, b);
        for (int64_t d = 0; d < D; ++d) {
          s1[size_t(d)] = A(1) + A(sc[d]);
          sh[size_t(d)] = A(sf[d]);
        }
        for (int64_t t = 0; t < T; ++t) {
          const E* xs = xp + (b * T + t) * D;
          for (int64_t d = 0; d < D; ++d) xr[size_t(d)] = A(xs[d]);
          const A mu = row_dot<A>(xr.data(), nullptr, D) / A(D);
          for (int64_t d = 0; d < D; ++d) xr[size_t(d)] -= mu;  // two-pass variance on the row in L1
          const A rs = A(1) / std::sqrt(row_dot<A>(xr.data(), xr.data(), D) / A(D) + A(eps));
          mp[b * T + t] = mu;
          rp[b * T + t] = rs;
          E* o = op + (b * T + t) * D;
          for (int64_t d = 0; d < D; ++d) o[d] = E(xr[size_t(d)] * rs * s1[size_t(d)] + sh[size_t(d)]);
        }
      }
    });
  });
}

void layer_norm_modulate_backward(const Tensor& g, const Tensor& x, const Tensor& scale, const Tensor& mean,
                                  const Tensor& rstd, const Tensor& dx, const Tensor& dshift, const Tensor& dscale) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2);
  by_dtype(x.dtype(), [&](auto tag) {
    using E = typename decltype(tag)::type;
    using A = Acc<E>;
    const E *gp = ptr<E>(g), *xp = ptr<E>(x);
    const A *mp = ptr<A>(mean), *rp = ptr<A>(rstd);
    E *dxp = ptr<E>(dx), *dshp = ptr<E>(dshift), *dscp = ptr<E>(dscale);
    parallel_for(0, B, grain(T, D), [&](int64_t lo, int64_t hi) {
      const size_t n = static_cast<size_t>(D);
      std::vector<A> s1(n), gs(n), gx(n), xh(n), gy(n);
      for (int64_t b = lo; b < hi; ++b) {
        const E* sc = row<E>(scale, b);
        for (int64_t d = 0; d < D; ++d) {
          s1[size_t(d)] = A(1) + A(sc[d]);
          gs[size_t(d)] = 0;
          gx[size_t(d)] = 0;
        }
        for (int64_t t = 0; t < T; ++t) {
          const E *gr = gp + (b * T + t) * D, *xs = xp + (b * T + t) * D;
          const A mu = mp[b * T + t], rs = rp[b * T + t];
          for (int64_t d = 0; d < D; ++d) {
            const A gv = A(gr[d]), h = (A(xs[d]) - mu) * rs;
            xh[size_t(d)] = h;
            gs[size_t(d)] += gv;
            gx[size_t(d)] += gv * h;
            gy[size_t(d)] = gv * s1[size_t(d)];
          }
          if (dxp) {
            const A a1 = row_dot<A>(gy.data(), nullptr, D) / A(D), a2 = row_dot<A>(gy.data(), xh.data(), D) / A(D);
            E* o = dxp + (b * T + t) * D;
            for (int64_t d = 0; d < D; ++d) o[d] = E(rs * (gy[size_t(d)] - a1 - xh[size_t(d)] * a2));
          }
        }
        for (int64_t d = 0; d < D; ++d) {
          if (dshp) dshp[b * D + d] = E(gs[size_t(d)]);
          if (dscp) dscp[b * D + d] = E(gx[size_t(d)]);
        }
      }
    });
  });
}

void gated_residual_forward(const Tensor& x, const Tensor& gate, const Tensor& y, const Tensor& out) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2);
  by_dtype(x.dtype(), [&](auto tag) {
    using E = typename decltype(tag)::type;
    using A = Acc<E>;
    const E *xp = ptr<E>(x), *yp = ptr<E>(y);
    E* op = ptr<E>(out);
    parallel_for(0, B, grain(T, D), [&](int64_t lo, int64_t hi) {
      std::vector<A> gv(static_cast<size_t>(D));
      for (int64_t b = lo; b < hi; ++b) {
        const E* gr = row<E>(gate, b);
        for (int64_t d = 0; d < D; ++d) gv[size_t(d)] = A(gr[d]);
        for (int64_t t = 0; t < T; ++t) {
          const int64_t o0 = (b * T + t) * D;
          for (int64_t d = 0; d < D; ++d) op[o0 + d] = E(A(xp[o0 + d]) + gv[size_t(d)] * A(yp[o0 + d]));
        }
      }
    });
  });
}

void gated_residual_backward(const Tensor& g, const Tensor& gate, const Tensor& y, const Tensor& dgate,
                             const Tensor& dy) {
  const int64_t B = y.size(0), T = y.size(1), D = y.size(2);
  by_dtype(y.dtype(), [&](auto tag) {
    using E = typename decltype(tag)::type;
    using A = Acc<E>;
    const E *gp = ptr<E>(g), *yp = ptr<E>(y);
    E *dgp = ptr<E>(dgate), *dyp = ptr<E>(dy);
    parallel_for(0, B, grain(T, D), [&](int64_t lo, int64_t hi) {
      std::vector<A> gv(static_cast<size_t>(D)), acc(static_cast<size_t>(D));
      for (int64_t b = lo; b < hi; ++b) {
        const E* gr = row<E>(gate, b);
        for (int64_t d = 0; d < D; ++d) {
          gv[size_t(d)] = A(gr[d]);
          acc[size_t(d)] = 0;
        }
        for (int64_t t = 0; t < T; ++t) {
          const int64_t o0 = (b * T + t) * D;
          if (dyp)
            for (int64_t d = 0; d < D; ++d) dyp[o0 + d] = E(A(gp[o0 + d]) * gv[size_t(d)]);
          if (dgp)
            for (int64_t d = 0; d < D; ++d) acc[size_t(d)] += A(gp[o0 + d]) * A(yp[o0 + d]);
        }
        if (dgp)
          for (int64_t d = 0; d < D; ++d) dgp[b * D + d] = E(acc[size_t(d)]);
      }
    });
  });
}

}  // namespace kiln::backend::cpu
