// The CPU elementwise iteration engine. Operands (output first) are viewed
// with the output's shape, broadcast dims get stride 0, adjacent dims that
// are contiguous for every operand are merged, and the work is split over the
// pool by flat element index. Kernels receive the innermost run:
//
//   fn(std::array<char*, N> ptrs, std::array<int64_t, N> byte_strides, int64_t n)
//
// and write a plain loop over n elements (a contiguous fast path when every
// stride equals the element size).
#pragma once

#include <array>
#include <cstdint>

#include "kiln/core/parallel.h"
#include "kiln/core/tensor.h"

namespace kiln::backend::cpu {

/// Elements below which a loop runs on one thread.
inline constexpr int64_t kParallelGrain = 32768;

template <int N>
struct StridedLoop {
  int ndim = 0;
  std::array<int64_t, 12> shape{};
  std::array<std::array<int64_t, 12>, N> strides{};  // bytes
  std::array<char*, N> base{};
  int64_t numel = 1;
};

/// Builds the loop for `ops` (ops[0] is the output; every other operand's
/// shape broadcasts to it). Throws for more than 12 dims after merging.
template <int N>
StridedLoop<N> make_loop(const std::array<const Tensor*, N>& ops) {
  StridedLoop<N> L;
  const Shape& out = ops[0]->shape();
  int nd = int(out.size());
  // Per-operand element strides aligned to the output's dims.
  std::array<std::array<int64_t, 64>, N> st{};
  KILN_CHECK(nd <= 64, "elementwise", "tensors with {} dims are not supported (max 64)", nd);
  for (int k = 0; k < N; ++k) {
    const Tensor& t = *ops[k];
    int off = nd - int(t.dim());
    for (int d = 0; d < nd; ++d) {
      int td = d - off;
      st[k][d] = (td < 0 || t.shape()[td] == 1) ? 0 : t.strides()[td] * t.itemsize();
    }
    L.base[k] = static_cast<char*>(t.data_ptr());
  }
  // Merge dims from the innermost outwards; drop size-1 dims.
  int m = 0;
  for (int d = nd - 1; d >= 0; --d) {
    int64_t size = out[d];
    if (size == 1) continue;
    if (m > 0) {
      bool mergeable = true;
      for (int k = 0; k < N; ++k)
        if (st[k][d] != L.strides[k][m - 1] * L.shape[m - 1]) mergeable = false;
      if (mergeable) {
        L.shape[m - 1] *= size;
        continue;
      }
    }
    KILN_CHECK(m < 12, "elementwise", "layout of shape {} has too many non-mergeable dims (max 12)",
               to_string(out));
    L.shape[m] = size;
    for (int k = 0; k < N; ++k) L.strides[k][m] = st[k][d];
    ++m;
  }
  L.ndim = m;  // dims stored innermost first
  L.numel = ops[0]->numel();
  return L;
}

/// Calls fn on the innermost runs covering flat output elements [begin, end).
template <int N, class F>
void run_range(const StridedLoop<N>& L, int64_t begin, int64_t end, F& fn) {
  std::array<int64_t, N> inner{};
  if (L.ndim == 0) {  // a single element
    fn(L.base, inner, end - begin);
    return;
  }
  for (int k = 0; k < N; ++k) inner[k] = L.strides[k][0];
  const int64_t n0 = L.shape[0];
  // Decompose begin into a multi-index (innermost first).
  std::array<int64_t, 12> idx{};
  int64_t rest = begin;
  for (int d = 0; d < L.ndim; ++d) {
    idx[d] = rest % L.shape[d];
    rest /= L.shape[d];
  }
  int64_t pos = begin;
  while (pos < end) {
    std::array<char*, N> p;
    for (int k = 0; k < N; ++k) {
      int64_t off = 0;
      for (int d = 0; d < L.ndim; ++d) off += idx[d] * L.strides[k][d];
      p[k] = L.base[k] + off;
    }
    int64_t n = std::min(n0 - idx[0], end - pos);
    fn(p, inner, n);
    pos += n;
    idx[0] += n;
    for (int d = 0; d < L.ndim - 1 && idx[d] == L.shape[d]; ++d) {
      idx[d] = 0;
      ++idx[d + 1];
    }
  }
}

/// Runs fn over every element of ops[0]'s shape, in parallel for large tensors.
template <int N, class F>
void for_each_run(const std::array<const Tensor*, N>& ops, F&& fn) {
  StridedLoop<N> L = make_loop<N>(ops);
  if (L.numel == 0) return;
  parallel_for(0, L.numel, kParallelGrain, [&](int64_t lo, int64_t hi) { run_range<N>(L, lo, hi, fn); });
}

}  // namespace kiln::backend::cpu
