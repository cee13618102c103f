// CPU max/min along one dim with the index of the first extreme (NaN counts
// as the extreme, like PyTorch), and cumsum along one dim.
#include <algorithm>
#include <limits>

#include "kiln/core/parallel.h"
#include "src/backend/cpu/reduce/reduce.h"

namespace kiln::backend::cpu {

namespace {

constexpr int64_t kGrain = 32768;

// Whether v replaces the current extreme `best` (strictly better, so the
// first occurrence wins; a NaN beats any number and is never replaced).
template <class A, bool Max>
struct Better {
  bool operator()(A v, A best) const {
    if constexpr (std::is_floating_point_v<A>) return (Max ? v > best : v < best) || (v != v && best == best);
    else return Max ? v > best : v < best;
  }
};

template <class T>
using cmp_t = std::conditional_t<std::is_same_v<T, bool>, uint8_t, acc_t<T>>;

// Index of the first extreme of a contiguous row. Lane k tracks the first
// extreme among elements k, k + L, ...; lanes then merge, ties going to the
// smaller index, so the result is the row's first extreme.
template <class T, bool Max>
int64_t row_arg(const T* row, int64_t n) {
  using A = cmp_t<T>;
  const Better<A, Max> better;
  constexpr int L = 16;
  int64_t i = 0, bi = 0;
  A best = A(row[0]);
  if (n >= 2 * L) {
    A lb[L];
    int64_t li[L];
    for (int k = 0; k < L; ++k) {
      lb[k] = A(row[k]);
      li[k] = k;
    }
    for (i = L; i + L <= n; i += L) {
#pragma omp simd
      for (int k = 0; k < L; ++k) {
        A v = A(row[i + k]);
        bool take = better(v, lb[k]);
        lb[k] = take ? v : lb[k];
        li[k] = take ? i + k : li[k];
      }
    }
    best = lb[0];
    bi = li[0];
    for (int k = 1; k < L; ++k) {
      bool same = !better(lb[k], best) && !better(best, lb[k]);  // equal, or both NaN
      if (better(lb[k], best) || (same && li[k] < bi)) {
        best = lb[k];
        bi = li[k];
      }
    }
  }
  for (; i < n; ++i)
    if (better(A(row[i]), best)) {
      best = A(row[i]);
      bi = i;
    }
  return bi;
}

template <class T, bool Max>
void arg_reduce(const Tensor& x, int64_t dim, const Tensor& values, const Tensor& indices) {
  using A = cmp_t<T>;
  const Better<A, Max> better;
  Rows R = rows_around(x, dim);
  const T* xp = static_cast<const T*>(R.c.data_ptr());
  T* vp = static_cast<T*>(values.data_ptr());
  int64_t* ip = static_cast<int64_t*>(indices.data_ptr());
  const int64_t n = R.n, inner = R.inner;
  if (R.outer * inner == 0) return;
  if (inner == 1) {
    parallel_for(0, R.outer, std::max<int64_t>(1, kGrain / n), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        int64_t bi = row_arg<T, Max>(xp + o * n, n);
        vp[o] = xp[o * n + bi];
        ip[o] = bi;
      }
    });
    return;
  }
  // Tiles of W adjacent columns: the compare-and-select runs across the tile.
  constexpr int W = 16;
  const int64_t tiles = (inner + W - 1) / W;
  parallel_for(0, R.outer * tiles, std::max<int64_t>(1, kGrain / (n * W)), [&](int64_t lo, int64_t hi) {
    for (int64_t u = lo; u < hi; ++u) {
      int64_t o = u / tiles, t = u % tiles;
      int g = int(std::min<int64_t>(W, inner - t * W));
      const T* base = xp + o * n * inner + t * W;
      A best[W];
      int64_t bi[W] = {};
      for (int j = 0; j < g; ++j) best[j] = A(base[j]);
      for (int64_t r = 1; r < n; ++r) {
#pragma omp simd
        for (int j = 0; j < g; ++j) {
          A v = A(base[r * inner + j]);
          bool take = better(v, best[j]);
          best[j] = take ? v : best[j];
          bi[j] = take ? r : bi[j];
        }
      }
      for (int j = 0; j < g; ++j) {
        vp[o * inner + t * W + j] = base[bi[j] * inner + j];
        ip[o * inner + t * W + j] = bi[j];
      }
    }
  });
}

template <class T, bool Max>
void arg_reduce_ref(const Tensor& x, int64_t dim, const Tensor& values, const Tensor& indices) {
  using A = cmp_t<T>;
  Rows R = rows_around(x, dim);
  const T* xp = static_cast<const T*>(R.c.data_ptr());
  T* vp = static_cast<T*>(values.data_ptr());
  int64_t* ip = static_cast<int64_t*>(indices.data_ptr());
  for (int64_t o = 0; o < R.outer; ++o)
    for (int64_t i = 0; i < R.inner; ++i) {
      int64_t bi = 0;
      for (int64_t r = 1; r < R.n; ++r)
        if (Better<A, Max>{}(A(xp[(o * R.n + r) * R.inner + i]), A(xp[(o * R.n + bi) * R.inner + i]))) bi = r;
      vp[o * R.inner + i] = xp[(o * R.n + bi) * R.inner + i];
      ip[o * R.inner + i] = bi;
    }
}

// values / indices may be undefined: a scratch tensor takes their place.
template <bool Ref, bool Max>
void max_min_dim(const Tensor& x, int64_t dim, const Tensor& values, const Tensor& indices) {
  Shape s = x.shape();
  if (x.dim() > 0) s.erase(size_t(dim));
  Tensor v = values.defined() ? values : Tensor::empty(s, x.dtype());
  Tensor i = indices.defined() ? indices : Tensor::empty(s, kI64);
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (Ref) arg_reduce_ref<T, Max>(x, dim, v, i);
    else arg_reduce<T, Max>(x, dim, v, i);
  });
}

// Running sums: floating x in f64 (as PyTorch's CPU kernel), others in i64.
template <class T>
using scan_acc_t = std::conditional_t<is_floating(dtype_v<T>), double, int64_t>;
template <class T>
using scan_out_t = std::conditional_t<is_floating(dtype_v<T>), T, int64_t>;

template <bool Ref>
void cumsum_impl(const Tensor& x, int64_t dim, const Tensor& out) {
  Rows R = rows_around(x, dim);
  if (x.numel() == 0) return;
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = scan_acc_t<T>;
    using O = scan_out_t<T>;
    const T* xp = static_cast<const T*>(R.c.data_ptr());
    O* op = static_cast<O*>(out.data_ptr());
    const int64_t n = R.n, inner = R.inner;
    if (Ref || inner == 1) {
      auto body = [&](int64_t lo, int64_t hi) {
        for (int64_t u = lo; u < hi; ++u) {
          int64_t o = u / inner, i = u % inner;
          A acc = 0;
          for (int64_t r = 0; r < n; ++r) {
            acc += A(xp[(o * n + r) * inner + i]);
            op[(o * n + r) * inner + i] = O(acc);
          }
        }
      };
      if (Ref) body(0, R.outer * inner);
      else parallel_for(0, R.outer * inner, std::max<int64_t>(1, kGrain / n), body);
      return;
    }
    constexpr int W = 16;
    const int64_t tiles = (inner + W - 1) / W;
    parallel_for(0, R.outer * tiles, std::max<int64_t>(1, kGrain / (n * W)), [&](int64_t lo, int64_t hi) {
      for (int64_t u = lo; u < hi; ++u) {
        int64_t o = u / tiles, t = u % tiles;
        int g = int(std::min<int64_t>(W, inner - t * W));
        const int64_t off = o * n * inner + t * W;
        A acc[W] = {};
        for (int64_t r = 0; r < n; ++r) {
#pragma omp simd
          for (int j = 0; j < g; ++j) {
            acc[j] += A(xp[off + r * inner + j]);
            op[off + r * inner + j] = O(acc[j]);
          }
        }
      }
    });
  });
}

}  // namespace

void max_dim(const Tensor& x, int64_t dim, const Tensor& values, const Tensor& indices) {
  max_min_dim<false, true>(x, dim, values, indices);
}
void min_dim(const Tensor& x, int64_t dim, const Tensor& values, const Tensor& indices) {
  max_min_dim<false, false>(x, dim, values, indices);
}
void cumsum(const Tensor& x, int64_t dim, const Tensor& out) { cumsum_impl<false>(x, dim, out); }

namespace ref {
void max_dim(const Tensor& x, int64_t dim, const Tensor& values, const Tensor& indices) {
  max_min_dim<true, true>(x, dim, values, indices);
}
void min_dim(const Tensor& x, int64_t dim, const Tensor& values, const Tensor& indices) {
  max_min_dim<true, false>(x, dim, values, indices);
}
void cumsum(const Tensor& x, int64_t dim, const Tensor& out) { cumsum_impl<true>(x, dim, out); }
}  // namespace ref

}  // namespace kiln::backend::cpu
