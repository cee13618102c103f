// CPU softmax, log_softmax and logsumexp along one dim: one pass per row for
// the max, one for exp and its sum, one to scale (vectorized along the row,
// or across a tile of columns when the dim is not the innermost).
// Compiled once per kernel ISA (NOTE [Per-ISA kernels] in CMakeLists.txt); the
// reference kernels are in ../softmax_ref.cpp.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/core/parallel.h"
#include "src/backend/cpu/dispatch.h"
#include "src/backend/cpu/reduce/isa/softmax.h"
#include "src/backend/cpu/reduce/reduce.h"
#include "src/backend/cpu/vec_math.h"

namespace kiln::backend::cpu::KILN_ISA_NS {

namespace {

constexpr int64_t kGrain = 32768;  // elements per parallel chunk, at least

template <class A>
A max_nan(A a, A v) { return (v > a || v != v) ? v : a; }

// Max of n contiguous elements with independent lanes (NaN wins).
template <class T, class A = acc_t<T>>
A row_max(const T* p, int64_t n) {
  constexpr int L = 16;
  A m = -std::numeric_limits<A>::infinity();
  int64_t i = 0;
  if (n >= L) {
    A lane[L];
    for (int k = 0; k < L; ++k) lane[k] = m;
    for (; i + L <= n; i += L) {
#pragma omp simd
      for (int k = 0; k < L; ++k) lane[k] = max_nan(lane[k], A(p[i + k]));
    }
    for (int k = 0; k < L; ++k) m = max_nan(m, lane[k]);
  }
  for (; i < n; ++i) m = max_nan(m, A(p[i]));
  return m;
}

// sum(exp(p - m)) over n contiguous elements; with Store, also writes the
// exps into e. Lanes add blocks of kBlock elements in A, the block sums add
// in f64, so f32 rows of any length stay accurate.
template <bool Store, class T, class A = acc_t<T>>
A row_exp_sum(const T* __restrict p, int64_t n, A m, T* __restrict e) {
  constexpr int L = 16;
  constexpr int64_t kBlock = 1024;
  double total = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t hi = std::min(n, b + kBlock);
    A lane[L] = {};
    int64_t i = b;
    for (; i + L <= hi; i += L) {
#pragma omp simd
      for (int k = 0; k < L; ++k) {
        A v = vexp(A(p[i + k]) - m);
        if constexpr (Store) e[i + k] = T(v);
        lane[k] += v;
      }
    }
    for (int k = 0; i < hi; ++i, ++k) {
      A v = vexp(A(p[i]) - m);
      if constexpr (Store) e[i] = T(v);
      lane[k] += v;
    }
    for (int w = L / 2; w >= 1; w /= 2)
      for (int k = 0; k < w; ++k) lane[k] += lane[k + w];
    total += double(lane[0]);
  }
  return A(total);
}

// softmax (Log = false) or log_softmax of one contiguous row.
template <class T, bool Log>
void softmax_row(const T* x, T* out, int64_t n) {
  using A = acc_t<T>;
  A m = row_max(x, n);
  if constexpr (Log) {
    A ls = std::log(row_exp_sum<false>(x, n, m, out));
    for (int64_t i = 0; i < n; ++i) out[i] = T(A(x[i]) - m - ls);
  } else if constexpr (std::is_same_v<T, A>) {
    A inv = A(1) / row_exp_sum<true>(x, n, m, out);  // out holds the exps
    for (int64_t i = 0; i < n; ++i) out[i] *= inv;
  } else {  // bf16: exps recomputed in f32 rather than rounded twice
    A inv = A(1) / row_exp_sum<false>(x, n, m, out);
    for (int64_t i = 0; i < n; ++i) out[i] = T(vexp(A(x[i]) - m) * inv);
  }
}

// The same over a tile of g <= W adjacent columns (stride `inner` between rows).
template <class T, bool Log, int W>
void softmax_tile(const T* x, T* out, int64_t n, int64_t inner, int g) {
  using A = acc_t<T>;
  A m[W], s[W];
  double sum[W] = {};  // f64: long columns stay accurate
  for (int j = 0; j < W; ++j) m[j] = -std::numeric_limits<A>::infinity();
  for (int64_t r = 0; r < n; ++r) {
#pragma omp simd
    for (int j = 0; j < g; ++j) m[j] = max_nan(m[j], A(x[r * inner + j]));
  }
  for (int64_t r = 0; r < n; ++r) {
#pragma omp simd
    for (int j = 0; j < g; ++j) sum[j] += double(vexp(A(x[r * inner + j]) - m[j]));
  }
  for (int j = 0; j < g; ++j) s[j] = Log ? m[j] + A(std::log(sum[j])) : A(1.0 / sum[j]);
  for (int64_t r = 0; r < n; ++r) {
#pragma omp simd
    for (int j = 0; j < g; ++j) {
      A v = A(x[r * inner + j]);
      out[r * inner + j] = Log ? T(v - s[j]) : T(vexp(v - m[j]) * s[j]);
    }
  }
}

// log(sum(exp(x - shift))) + shift, where shift is the row max unless that is
// infinite (then 0): a row of all -inf gives log(0) = -inf, a +inf gives inf.
template <class A>
A lse_finish(A m, A s) { return std::log(s) + (std::isinf(m) ? A(0) : m); }

}  // namespace

void softmax(const Tensor& x, int64_t dim, const Tensor& out, bool log) {
  Rows R = rows_around(x, dim);
  if (R.n == 0 || x.numel() == 0) return;
  dispatch_only<bfloat16, float, double>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(R.c.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    auto go = [&](auto log_tag) {
      constexpr bool Log = decltype(log_tag)::value;
      if (R.inner == 1) {
        parallel_for(0, R.outer, std::max<int64_t>(1, kGrain / R.n), [&](int64_t lo, int64_t hi) {
          for (int64_t o = lo; o < hi; ++o) softmax_row<T, Log>(xp + o * R.n, op + o * R.n, R.n);
        });
        return;
      }
      constexpr int W = 16;
      const int64_t tiles = (R.inner + W - 1) / W;
      parallel_for(0, R.outer * tiles, std::max<int64_t>(1, kGrain / (R.n * W)), [&](int64_t lo, int64_t hi) {
        for (int64_t u = lo; u < hi; ++u) {
          int64_t o = u / tiles, t = u % tiles;
          int g = int(std::min<int64_t>(W, R.inner - t * W));
          int64_t off = o * R.n * R.inner + t * W;
          softmax_tile<T, Log, W>(xp + off, op + off, R.n, R.inner, g);
        }
      });
    };
    if (log) go(std::true_type{});
    else go(std::false_type{});
    });
}

void logsumexp(const Tensor& x, int64_t dim, const Tensor& out) {
  Rows R = rows_around(x, dim);
  if (out.numel() == 0) return;
  dispatch_only<bfloat16, float, double>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* xp = static_cast<const T*>(R.c.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    if (R.inner == 1) {
      parallel_for(0, R.outer, std::max<int64_t>(1, kGrain / std::max<int64_t>(R.n, 1)), [&](int64_t lo, int64_t hi) {
        for (int64_t o = lo; o < hi; ++o) {
          const T* row = xp + o * R.n;
          A m = row_max(row, R.n);
          A shift = std::isinf(m) ? A(0) : m;
          op[o] = T(lse_finish(m, row_exp_sum<false>(row, R.n, shift, static_cast<T*>(nullptr))));
        }
      });
      return;
    }
    constexpr int W = 16;
    const int64_t tiles = (R.inner + W - 1) / W;
    parallel_for(0, R.outer * tiles, std::max<int64_t>(1, kGrain / (std::max<int64_t>(R.n, 1) * W)),
                 [&](int64_t lo, int64_t hi) {
      for (int64_t u = lo; u < hi; ++u) {
        int64_t o = u / tiles, t = u % tiles;
        int g = int(std::min<int64_t>(W, R.inner - t * W));
        const T* base = xp + o * R.n * R.inner + t * W;
        A m[W], shift[W];
        double s[W] = {};
        for (int j = 0; j < W; ++j) m[j] = -std::numeric_limits<A>::infinity();
        for (int64_t r = 0; r < R.n; ++r) {
#pragma omp simd
          for (int j = 0; j < g; ++j) m[j] = max_nan(m[j], A(base[r * R.inner + j]));
        }
        for (int j = 0; j < W; ++j) shift[j] = std::isinf(m[j]) ? A(0) : m[j];
        for (int64_t r = 0; r < R.n; ++r) {
#pragma omp simd
          for (int j = 0; j < g; ++j) s[j] += double(vexp(A(base[r * R.inner + j]) - shift[j]));
        }
        for (int j = 0; j < g; ++j) op[o * R.inner + t * W + j] = T(lse_finish(m[j], A(s[j])));
      }
    });
    });
}

}  // namespace kiln::backend::cpu::KILN_ISA_NS
