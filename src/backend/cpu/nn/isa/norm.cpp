// CPU layer_norm / rms_norm / batch_norm kernels. Rows are contiguous; inner
// loops are `omp simd` reductions in acc_t<T> over blocks of kBlock elements
// whose totals add in f64, so long rows stay accurate in f32. Work is split
// into chunks that depend only on the shapes (never on the thread count), and
// cross-row sums combine chunk partials in chunk order: results are
// bit-identical for any number of threads.
// Compiled once per kernel ISA (NOTE [Per-ISA kernels] in CMakeLists.txt); the
// reference kernels are in ../norm_ref.cpp.
#include "src/backend/cpu/nn/norm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kiln/core/parallel.h"
#include "src/backend/cpu/dispatch.h"
#include "src/backend/cpu/nn/isa/norm.h"

namespace kiln::backend::cpu::KILN_ISA_NS {

namespace {

constexpr int64_t kBlock = 512;    // elements summed in acc_t before adding into f64
constexpr int64_t kGrain = 16384;  // elements per parallel chunk, at least

template <class T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}
template <class T>
T* mut_or_null(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

// Calls fn with std::true_type / std::false_type for each flag, so inner
// loops are compiled without the branch.
template <class F>
void with_flags(bool a, bool b, F&& fn) {
  if (a && b) fn(std::true_type{}, std::true_type{});
  else if (a) fn(std::true_type{}, std::false_type{});
  else if (b) fn(std::false_type{}, std::true_type{});
  else fn(std::false_type{}, std::false_type{});
}

// sum(f(A(p[i]))) over n contiguous elements: lanes in A per block, blocks in f64.
template <class T, class F, class A = acc_t<T>>
double row_sum(const T* __restrict p, int64_t n, F f) {
  double total = 0;
  for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
    const int64_t hi = std::min(n, b0 + kBlock);
    A s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = b0; i < hi; ++i) s += f(A(p[i]));
    total += double(s);
  }
  return total;
}

// ---- layer norm ----

// Rows [0, rows) of N (rows <= kSweepRows): mean, rstd and the normalised,
// scaled output. Each step sweeps the whole block of rows before the next
// (means, then variances, then outputs): the rows of a sweep are independent,
// so their dependency chains (reduce, divide, sqrt) overlap in the pipeline
// instead of running one row after another. A block of 64 f32 rows of 128
// stays in L1 across the sweeps.
constexpr int64_t kSweepRows = 64;
// Rows per sweep block for rows of n: about 8192 elements (32 KiB of f32), at most kSweepRows.
inline int64_t sweep_rows(int64_t n) { return std::clamp<int64_t>(8192 / std::max<int64_t>(n, 1), 1, kSweepRows); }

template <class T, bool HasW, bool HasB, class A = acc_t<T>>
void ln_block(const T* __restrict x, const T* __restrict w, const T* __restrict b, T* __restrict y, int64_t rows,
              int64_t n, A eps, bool rms, A* __restrict mean, A* __restrict rstd) {
  for (int64_t r = 0; r < rows; ++r)
    mean[r] = rms ? A(0) : A(row_sum(x + r * n, n, [](A v) { return v; }) / double(n));
  for (int64_t r = 0; r < rows; ++r) {
    const A m = mean[r];
    const A var = A(row_sum(x + r * n, n, [m](A v) { return (v - m) * (v - m); }) / double(n));
    rstd[r] = A(1) / std::sqrt(var + eps);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const A m = mean[r], s = rstd[r];
    const T* __restrict xr = x + r * n;
    T* __restrict yr = y + r * n;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      A v = (A(xr[i]) - m) * s;
      if constexpr (HasW) v *= A(w[i]);
      if constexpr (HasB) v += A(b[i]);
      yr[i] = T(v);
    }
  }
}

// The backward of rows [0, rows) in the same sweeps (row sums, then gx and
// the weight/bias partials pw, pb).
template <class T, bool HasW, bool WantParams, class A = acc_t<T>>
void ln_block_backward(const T* __restrict g, const T* __restrict x, const T* __restrict w, T* __restrict gx,
                       int64_t rows, int64_t n, const A* __restrict mean, const A* __restrict rstd, bool rms,
                       A* __restrict pw, A* __restrict pb) {
  A c1[kSweepRows], c2[kSweepRows];  // mean(h), mean(h * xhat) per row, h = g * w
  for (int64_t r = 0; r < rows; ++r) {
    const T* __restrict gr = g + r * n;
    const T* __restrict xr = x + r * n;
    const A m = mean ? mean[r] : A(0), s = rstd[r];
    double s1 = 0, s2 = 0;
    for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
      const int64_t hi = std::min(n, b0 + kBlock);
      A a1 = 0, a2 = 0;
#pragma omp simd reduction(+ : a1, a2)
      for (int64_t i = b0; i < hi; ++i) {
        A h = A(gr[i]);
        if constexpr (HasW) h *= A(w[i]);
        a1 += h;
        a2 += h * (A(xr[i]) - m) * s;
      }
      s1 += double(a1);
      s2 += double(a2);
    }
    c1[r] = rms ? A(0) : A(s1 / double(n));
    c2[r] = A(s2 / double(n));
  }
  for (int64_t r = 0; r < rows; ++r) {
    const T* __restrict gr = g + r * n;
    const T* __restrict xr = x + r * n;
    const A m = mean ? mean[r] : A(0), s = rstd[r], k1 = c1[r], k2 = c2[r];
    if (WantParams && gx) {  // both in one pass over g and x
      T* __restrict gxr = gx + r * n;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        const A gi = A(gr[i]);
        A h = gi;
        if constexpr (HasW) h *= A(w[i]);
        const A xh = (A(xr[i]) - m) * s;
        gxr[i] = T(s * (h - k1 - xh * k2));
        pw[i] += gi * xh;
        pb[i] += gi;
      }
      continue;
    }
    if (gx) {
      T* __restrict gxr = gx + r * n;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        A h = A(gr[i]);
        if constexpr (HasW) h *= A(w[i]);
        const A xh = (A(xr[i]) - m) * s;
        gxr[i] = T(s * (h - k1 - xh * k2));
      }
    }
    if constexpr (WantParams) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        const A gi = A(gr[i]);
        pw[i] += gi * (A(xr[i]) - m) * s;
        pb[i] += gi;
      }
    }
  }
}

}  // namespace

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, bool rms, const Tensor& out,
                const Tensor& mean, const Tensor& rstd) {
  const int64_t M = rstd.numel();
  if (M == 0) return;
  const int64_t N = x.numel() / M;
  dispatch_only<bfloat16, float, double>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* w = ptr_or_null<T>(weight);
    const T* b = ptr_or_null<T>(bias);
    T* y = static_cast<T*>(out.data_ptr());
    A* mp = mut_or_null<A>(mean);
    A* rp = static_cast<A*>(rstd.data_ptr());
    with_flags(w != nullptr, b != nullptr, [&](auto hw, auto hb) {
      parallel_for(0, M, std::max<int64_t>(1, kGrain / N), [&](int64_t lo, int64_t hi) {
        A local_mean[kSweepRows];  // rms: the means are zeros, not an output
        const int64_t sweep = sweep_rows(N);
        for (int64_t r = lo; r < hi; r += sweep) {
          const int64_t rows = std::min(sweep, hi - r);
          ln_block<T, decltype(hw)::value, decltype(hb)::value>(xp + r * N, w, b, y + r * N, rows, N, A(eps), rms,
                                                                  mp ? mp + r : local_mean, rp + r);
        }
      });
    });
    });
}

void layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, bool rms, const Tensor& gx, const Tensor& gweight, const Tensor& gbias) {
  const int64_t M = rstd.numel();
  const int64_t N = M ? x.numel() / M : (gweight.defined() ? gweight.numel() : gbias.defined() ? gbias.numel() : 0);
  dispatch_only<bfloat16, float, double>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const bool want_params = gweight.defined() || gbias.defined();
    // Chunks of whole rows: their count depends on the shape only.
    const int64_t rows_per_chunk = std::max<int64_t>(1, kGrain / std::max<int64_t>(N, 1));
    const int64_t chunks = (M + rows_per_chunk - 1) / rows_per_chunk;
    std::vector<A> partial(want_params ? size_t(2 * chunks * N) : 0, A(0));
    const T* gp = static_cast<const T*>(g.data_ptr());
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* w = ptr_or_null<T>(weight);
    const A* mp = ptr_or_null<A>(mean);
    const A* rp = static_cast<const A*>(rstd.data_ptr());
    T* gxp = mut_or_null<T>(gx);
    with_flags(w != nullptr, want_params, [&](auto hw, auto wp) {
      parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t c = lo; c < hi; ++c) {
          A* pw = want_params ? partial.data() + 2 * c * N : nullptr;
          A* pb = want_params ? pw + N : nullptr;
          const int64_t r1 = std::min(M, (c + 1) * rows_per_chunk);
          const int64_t sweep = sweep_rows(N);
          for (int64_t r = c * rows_per_chunk; r < r1; r += sweep)
            ln_block_backward<T, decltype(hw)::value, decltype(wp)::value>(
                gp + r * N, xp + r * N, w, gxp ? gxp + r * N : nullptr, std::min(sweep, r1 - r), N,
                mp ? mp + r : nullptr, rp + r, rms, pw, pb);
        }
      });
    });
    if (!want_params) return;
    T* gw = mut_or_null<T>(gweight);
    T* gb = mut_or_null<T>(gbias);
    parallel_for(0, N, 4096, [&](int64_t lo, int64_t hi) {
      for (int64_t j = lo; j < hi; ++j) {
        A sw = 0, sb = 0;
        for (int64_t c = 0; c < chunks; ++c) {
          sw += partial[size_t(2 * c * N + j)];
          sb += partial[size_t(2 * c * N + N + j)];
        }
        if (gw) gw[j] = T(sw);
        if (gb) gb[j] = T(sb);
      }
    });
    });
}

// ---- batch norm: x [B, C, L] ----

namespace {

struct BnDims {
  int64_t B, C, L;
};
BnDims bn_dims(const Tensor& x) {
  int64_t B = x.size(0), C = x.size(1);
  return {B, C, B * C != 0 ? x.numel() / (B * C) : 0};
}

}  // namespace

void batch_norm_stats(const Tensor& x, const Tensor& mean, const Tensor& var) {
  const auto [B, C, L] = bn_dims(x);
  dispatch_only<bfloat16, float, double>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    A* mp = static_cast<A*>(mean.data_ptr());
    A* vp = static_cast<A*>(var.data_ptr());
    parallel_for(0, C, std::max<int64_t>(1, kGrain / std::max<int64_t>(B * L, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        double count = 0, m = 0, m2 = 0;  // Chan et al.'s pairwise update, row by row
        for (int64_t b = 0; b < B; ++b) {
          const T* row = xp + (b * C + c) * L;
          const double rm = row_sum(row, L, [](A v) { return v; }) / double(L);
          const A rma = A(rm);
          const double rm2 = row_sum(row, L, [rma](A v) { return (v - rma) * (v - rma); });
          const double n = count + double(L), delta = rm - m;
          m += delta * double(L) / n;
          m2 += rm2 + delta * delta * count * double(L) / n;
          count = n;
        }
        mp[c] = A(m);
        vp[c] = A(m2 / count);
      }
    });
    });
}

void batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                      const Tensor& bias, const Tensor& out) {
  const auto [B, C, L] = bn_dims(x);
  dispatch_only<bfloat16, float, double>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const A* mp = static_cast<const A*>(mean.data_ptr());
    const A* ip = static_cast<const A*>(invstd.data_ptr());
    const T* w = ptr_or_null<T>(weight);
    const T* b = ptr_or_null<T>(bias);
    // y = x * scale[c] + shift[c]: one multiply-add per element.
    std::vector<A> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
      scale[c] = ip[c] * (w ? A(w[c]) : A(1));
      shift[c] = (b ? A(b[c]) : A(0)) - mp[c] * scale[c];
    }
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* y = static_cast<T*>(out.data_ptr());
    parallel_for(0, B * C, std::max<int64_t>(1, kGrain / std::max<int64_t>(L, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const A s = scale[r % C], t = shift[r % C];
        const T* __restrict xr = xp + r * L;
        T* __restrict yr = y + r * L;
#pragma omp simd
        for (int64_t i = 0; i < L; ++i) yr[i] = T(A(xr[i]) * s + t);
      }
    });
    });
}

void batch_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                         const Tensor& weight, bool training, const Tensor& gx, const Tensor& gweight,
                         const Tensor& gbias) {
  const auto [B, C, L] = bn_dims(x);
  dispatch_only<bfloat16, float, double>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* gp = static_cast<const T*>(g.data_ptr());
    const T* xp = static_cast<const T*>(x.data_ptr());
    const A* mp = static_cast<const A*>(mean.data_ptr());
    const A* ip = static_cast<const A*>(invstd.data_ptr());
    const T* w = ptr_or_null<T>(weight);
    // Per channel: sum(g) and sum(g * (x - mean)).
    std::vector<double> sg(static_cast<size_t>(C)), sgx(static_cast<size_t>(C));
    const bool need_sums = training || gweight.defined() || gbias.defined();
    if (need_sums)
      parallel_for(0, C, std::max<int64_t>(1, kGrain / std::max<int64_t>(B * L, 1)), [&](int64_t lo, int64_t hi) {
        for (int64_t c = lo; c < hi; ++c) {
          double s1 = 0, s2 = 0;
          const A m = mp[c];
          for (int64_t b = 0; b < B; ++b) {
            const T* gr = gp + (b * C + c) * L;
            const T* xr = xp + (b * C + c) * L;
            for (int64_t b0 = 0; b0 < L; b0 += kBlock) {
              const int64_t hi2 = std::min(L, b0 + kBlock);
              A a1 = 0, a2 = 0;
#pragma omp simd reduction(+ : a1, a2)
              for (int64_t i = b0; i < hi2; ++i) {
                a1 += A(gr[i]);
                a2 += A(gr[i]) * (A(xr[i]) - m);
              }
              s1 += double(a1);
              s2 += double(a2);
            }
          }
          sg[c] = s1;
          sgx[c] = s2;
        }
      });
    if (T* gw = mut_or_null<T>(gweight))
      for (int64_t c = 0; c < C; ++c) gw[c] = T(sgx[c] * double(ip[c]));
    if (T* gb = mut_or_null<T>(gbias))
      for (int64_t c = 0; c < C; ++c) gb[c] = T(sg[c]);
    T* gxp = mut_or_null<T>(gx);
    if (!gxp) return;
    // gx = k_g * g + k_x * (x - mean) + k_0 per channel.
    std::vector<A> kg(static_cast<size_t>(C)), kx(static_cast<size_t>(C)), k0(static_cast<size_t>(C));
    const double n = double(B * L);
    for (int64_t c = 0; c < C; ++c) {
      const double wi = double(ip[c]) * (w ? double(w[c]) : 1.0);
      kg[c] = A(wi);
      kx[c] = training ? A(-wi * sgx[c] * double(ip[c]) * double(ip[c]) / n) : A(0);
      k0[c] = training ? A(-wi * sg[c] / n) : A(0);
    }
    parallel_for(0, B * C, std::max<int64_t>(1, kGrain / std::max<int64_t>(L, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t c = r % C;
        const A a = kg[c], bx = kx[c], z = k0[c], m = mp[c];
        const T* __restrict gr = gp + r * L;
        const T* __restrict xr = xp + r * L;
        T* __restrict o = gxp + r * L;
#pragma omp simd
        for (int64_t i = 0; i < L; ++i) o[i] = T(a * A(gr[i]) + bx * (A(xr[i]) - m) + z);
      }
    });
    });
}

// ---- reference kernels: f64, element by element ----

}  // namespace kiln::backend::cpu::KILN_ISA_NS
