// The CPU reduction engine: reduces a strided input over any set of dims with
// a small functor (init/step/merge/finish), in one of two vectorizable shapes.
// Internal to src/backend/cpu/reduce (included by the reduction kernels only).
//
//   inner:  the reduced dims end in a stride-1 run -> each output reduces
//           contiguous runs with `kLanes` independent accumulators;
//   column: the kept dims end in a stride-1 run   -> each tile of W adjacent
//           outputs accumulates W lanes per reduced index (acc[j] += x[r, j]).
//
// Any other layout (no stride-1 dim) is copied to contiguous first.
//
// NOTE [Deterministic reduction tree]
// An output's reduced range [0, R) is cut into leaves of a fixed size (a
// function of R and the layout only); each leaf is folded with the lanes,
// and leaves are merged by a balanced pairwise tree (a single contiguous
// range of at most kShortRun elements is folded in order instead). The thread count only
// decides who computes which leaves (whole outputs in parallel, or the leaves
// of a few big outputs in parallel), never the tree, so results are
// bit-identical for any set_num_threads. The pairwise tree also keeps f32
// sums of millions of elements accurate (error ~ log2(R) ulp, not R ulp).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "kiln/core/parallel.h"
#include "kiln/core/tensor.h"

namespace kiln::backend::cpu::reduce_detail {

inline constexpr int kMaxDims = 16;
/// Input elements per leaf of the reduction tree.
inline constexpr int64_t kLeafElems = 4096;
/// Contiguous reduced ranges up to this length fold sequentially (no lanes).
inline constexpr int64_t kShortRun = 16;
/// Input elements below which a reduction runs on one thread.
inline constexpr int64_t kGrainElems = 32768;

/// x's dims split into kept (output order) and reduced, size-1 dims dropped,
/// adjacent dims merged where the layout allows; innermost last in each list.
struct Layout {
  int nk = 0, nr = 0;
  std::array<int64_t, kMaxDims> ksize{}, kstride{};  // kept dims: sizes, input strides (elements)
  std::array<int64_t, kMaxDims> rsize{}, rstride{};  // reduced dims, ordered by stride, descending
  int64_t n_out = 1, R = 1;
};

/// `dims`: sorted unique reduced dims. Returns false when more than kMaxDims
/// dims survive merging (the caller copies to contiguous, which merges).
inline bool make_layout(const Tensor& x, const Shape& dims, Layout& L) {
  const int64_t nd = x.dim();
  std::vector<char> red(size_t(nd), 0);
  for (int64_t d : dims) red[size_t(d)] = 1;
  L = Layout{};
  // Kept dims keep their order: the output is contiguous in that order.
  for (int64_t d = 0; d < nd; ++d) {
    int64_t s = x.shape()[d], st = x.strides()[d];
    if (red[size_t(d)]) {
      L.R *= s;
      continue;
    }
    L.n_out *= s;
    if (s == 1) continue;
    if (L.nk > 0 && L.kstride[L.nk - 1] == st * s) {
      L.ksize[L.nk - 1] *= s;
      L.kstride[L.nk - 1] = st;
      continue;
    }
    if (L.nk == kMaxDims) return false;
    L.ksize[L.nk] = s;
    L.kstride[L.nk++] = st;
  }
  // Reduced dims may be visited in any order: largest stride first, so the
  // innermost is the fastest-moving one in memory.
  std::array<std::pair<int64_t, int64_t>, 64> r{};  // (stride, size)
  int n = 0;
  for (int64_t d = 0; d < nd; ++d)
    if (red[size_t(d)] && x.shape()[d] != 1) {
      if (n == 64) return false;
      r[size_t(n++)] = {x.strides()[d], x.shape()[d]};
    }
  std::stable_sort(r.begin(), r.begin() + n, [](auto a, auto b) { return a.first > b.first; });
  for (int i = 0; i < n; ++i) {
    auto [st, s] = r[size_t(i)];
    if (L.nr > 0 && L.rstride[L.nr - 1] == st * s) {
      L.rsize[L.nr - 1] *= s;
      L.rstride[L.nr - 1] = st;
      continue;
    }
    if (L.nr == kMaxDims) return false;
    L.rsize[L.nr] = s;
    L.rstride[L.nr++] = st;
  }
  return true;
}

/// Offset (elements) of flat index i over dims [0, n) of (size, stride).
inline int64_t offset_of(int64_t i, int n, const std::array<int64_t, kMaxDims>& size,
                         const std::array<int64_t, kMaxDims>& stride) {
  int64_t off = 0;
  for (int d = n - 1; d >= 0; --d) {
    off += (i % size[size_t(d)]) * stride[size_t(d)];
    i /= size[size_t(d)];
  }
  return off;
}

/// Pairwise tree over leaves [a, b): out[0..G) = merge of leaf results, where
/// leaf(i, acc) writes leaf i's G accumulators. The split point depends only
/// on (a, b).
template <int G, class Acc, class Op, class Leaf>
void pairwise(int64_t a, int64_t b, Acc* out, int g, const Op& op, const Leaf& leaf) {
  if (b - a == 1) {
    leaf(a, out);
    return;
  }
  int64_t m = a + (b - a) / 2;
  pairwise<G>(a, m, out, g, op, leaf);
  Acc right[G];
  pairwise<G>(m, b, right, g, op, leaf);
#pragma omp simd
  for (int j = 0; j < g; ++j) out[j] = op.merge(out[j], right[j]);
}

/// Independent accumulators per contiguous fold: 256 bytes of them (four
/// AVX-512 registers), so the loop vectorizes without reassociating a chain.
template <class Acc>
inline constexpr int kLanes = int(256 / sizeof(Acc)) < 8 ? 8 : int(256 / sizeof(Acc));

/// Folds n contiguous elements into lane[0..kLanes) (element i into lane
/// i % kLanes for the full chunks, the tail into the first lanes).
template <class Op, class In>
void fold_lanes(typename Op::Acc* lane, const In* p, int64_t n, const Op& op) {
  constexpr int L = kLanes<typename Op::Acc>;
  int64_t i = 0;
  for (; i + L <= n; i += L) {
#pragma omp simd
    for (int k = 0; k < L; ++k) lane[k] = op.step(lane[k], p[i + k]);
  }
  for (int k = 0; i < n; ++i, ++k) lane[k] = op.step(lane[k], p[i]);
}

/// Merges the lanes pairwise into one accumulator.
template <class Op>
typename Op::Acc merge_lanes(typename Op::Acc* lane, const Op& op) {
  constexpr int L = kLanes<typename Op::Acc>;
  for (int w = L / 2; w >= 1; w /= 2) {
#pragma omp simd
    for (int k = 0; k < w; ++k) lane[k] = op.merge(lane[k], lane[k + w]);
  }
  return lane[0];
}

/// Runs the reduction of `x` (contiguous-enough layout L) into out.
/// Op: In, Acc, Out types; init(), step(Acc, In), merge(Acc, Acc), finish(Acc).
template <class Op>
void run(const Tensor& x, const Tensor& out, const Shape& dims, const Op& op);

template <class Op>
void run_layout(const Layout& L0, const typename Op::In* xp, typename Op::Out* op_out, const Op& op) {
  using Acc = typename Op::Acc;
  using In = typename Op::In;
  Layout L = L0;
  if (L.nr == 0) {  // nothing reduced: one element per output
    L.rsize[0] = 1;
    L.rstride[0] = 1;
    L.nr = 1;
  }
  const int64_t n_out = L.n_out, R = L.R;
  if (n_out == 0) return;
  const int threads = effective_num_threads();
  const bool serial = n_out * R < kGrainElems || threads == 1 || detail::in_parallel_region();

  if (R == 0) {
    for (int64_t o = 0; o < n_out; ++o) op_out[o] = op.finish(op.init());
    return;
  }

  if (L.rstride[size_t(L.nr - 1)] == 1) {
    // ---- inner: each output folds contiguous runs of its reduced range ----
    const int64_t n0 = L.rsize[size_t(L.nr - 1)];
    const int64_t leaf_len = kLeafElems;
    const int64_t n_leaves = (R + leaf_len - 1) / leaf_len;
    // A short contiguous range ([64, 2] -> [64] in a policy's entropy) folds
    // straight into one accumulator: setting up and merging kLanes lanes
    // costs ~10x the few steps. Still a function of R and the layout only.
    const bool short_run = L.nr == 1 && R <= kShortRun;
    auto leaf = [&](const In* base, int64_t i, Acc* acc) {
      if (short_run) {
        Acc a = op.init();
        for (int64_t k = 0; k < R; ++k) a = op.step(a, base[k]);
        acc[0] = a;
        return;
      }
      int64_t lo = i * leaf_len, hi = std::min(R, lo + leaf_len);
      Acc lane[kLanes<Acc>];
      for (auto& a : lane) a = op.init();
      while (lo < hi) {  // contiguous runs of the innermost reduced dim
        int64_t i0 = lo % n0;
        int64_t off = i0 + offset_of(lo / n0, L.nr - 1, L.rsize, L.rstride);
        int64_t len = std::min(n0 - i0, hi - lo);
        fold_lanes(lane, base + off, len, op);
        lo += len;
      }
      acc[0] = merge_lanes(lane, op);
    };
    auto one_output = [&](int64_t o) {
      const In* base = xp + offset_of(o, L.nk, L.ksize, L.kstride);
      Acc a;
      pairwise<1>(0, n_leaves, &a, 1, op, [&](int64_t i, Acc* acc) { leaf(base, i, acc); });
      op_out[o] = op.finish(a);
    };
    if (serial || n_out >= 4 * threads || n_leaves == 1) {
      int64_t grain = std::max<int64_t>(1, kGrainElems / R);
      parallel_for(0, n_out, serial ? n_out : grain, [&](int64_t lo, int64_t hi) {
        for (int64_t o = lo; o < hi; ++o) one_output(o);
      });
    } else {
      // Few big outputs: their leaves in parallel, then the same tree.
      std::vector<Acc> part(size_t(n_out * n_leaves));
      parallel_for(0, n_out * n_leaves, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t k = lo; k < hi; ++k) {
          int64_t o = k / n_leaves;
          leaf(xp + offset_of(o, L.nk, L.ksize, L.kstride), k % n_leaves, &part[size_t(k)]);
        }
      });
      for (int64_t o = 0; o < n_out; ++o) {
        Acc a;
        const Acc* p = &part[size_t(o * n_leaves)];
        pairwise<1>(0, n_leaves, &a, 1, op, [&](int64_t i, Acc* acc) { acc[0] = p[i]; });
        op_out[o] = op.finish(a);
      }
    }
    return;
  }

  // ---- column: tiles of W adjacent outputs along the stride-1 kept dim ----
  constexpr int W = kLanes<Acc>;
  const int64_t K = L.ksize[size_t(L.nk - 1)];  // the stride-1 kept dim
  const int64_t tiles = (K + W - 1) / W;
  const int64_t n_outer = n_out / K;
  const int64_t n_units = n_outer * tiles;
  const int64_t leaf_rows = std::max<int64_t>(1, kLeafElems / W);
  const int64_t n_leaves = (R + leaf_rows - 1) / leaf_rows;
  // Rows [lo, hi) of the reduced range, walked in runs along the innermost
  // reduced dim (a pointer step per row; the multi-index only between runs).
  const int64_t n0 = L.rsize[size_t(L.nr - 1)], s0 = L.rstride[size_t(L.nr - 1)];
  auto leaf = [&](const In* base, int g, int64_t i, Acc* acc) {
    int64_t lo = i * leaf_rows, hi = std::min(R, lo + leaf_rows);
    Acc a[W];
    for (int j = 0; j < W; ++j) a[j] = op.init();
    while (lo < hi) {
      int64_t i0 = lo % n0, len = std::min(n0 - i0, hi - lo);
      const In* p = base + i0 * s0 + offset_of(lo / n0, L.nr - 1, L.rsize, L.rstride);
      if (g == W) {
        for (int64_t r = 0; r < len; ++r, p += s0) {
#pragma omp simd
          for (int j = 0; j < W; ++j) a[j] = op.step(a[j], p[j]);
        }
      } else {
        for (int64_t r = 0; r < len; ++r, p += s0)
          for (int j = 0; j < g; ++j) a[j] = op.step(a[j], p[j]);
      }
      lo += len;
    }
    for (int j = 0; j < W; ++j) acc[j] = a[j];
  };
  auto unit_base = [&](int64_t u, int& g, int64_t& o0) {
    int64_t outer = u / tiles, t = u % tiles;
    g = int(std::min<int64_t>(W, K - t * W));
    o0 = outer * K + t * W;
    return xp + offset_of(outer, L.nk - 1, L.ksize, L.kstride) + t * W;
  };
  auto one_unit = [&](int64_t u) {
    int g;
    int64_t o0;
    const In* base = unit_base(u, g, o0);
    Acc a[W];
    pairwise<W>(0, n_leaves, a, g, op, [&](int64_t i, Acc* acc) { leaf(base, g, i, acc); });
    for (int j = 0; j < g; ++j) op_out[o0 + j] = op.finish(a[j]);
  };
  if (serial || n_units >= 4 * threads || n_leaves == 1) {
    int64_t grain = std::max<int64_t>(1, kGrainElems / (R * W));
    parallel_for(0, n_units, serial ? n_units : grain, [&](int64_t lo, int64_t hi) {
      for (int64_t u = lo; u < hi; ++u) one_unit(u);
    });
  } else {
    std::vector<Acc> part(size_t(n_units * n_leaves * W));
    parallel_for(0, n_units * n_leaves, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t k = lo; k < hi; ++k) {
        int g;
        int64_t o0;
        const In* base = unit_base(k / n_leaves, g, o0);
        leaf(base, g, k % n_leaves, &part[size_t(k * W)]);
      }
    });
    for (int64_t u = 0; u < n_units; ++u) {
      int g;
      int64_t o0;
      unit_base(u, g, o0);
      Acc a[W];
      const Acc* p = &part[size_t(u * n_leaves * W)];
      pairwise<W>(0, n_leaves, a, g, op, [&](int64_t i, Acc* acc) {
        for (int j = 0; j < g; ++j) acc[j] = p[i * W + j];
      });
      for (int j = 0; j < g; ++j) op_out[o0 + j] = op.finish(a[j]);
    }
  }
}

template <class Op>
void run(const Tensor& x, const Tensor& out, const Shape& dims, const Op& op) {
  using In = typename Op::In;
  using Out = typename Op::Out;
  Layout L;
  bool ok = make_layout(x, dims, L);
  // Usable when the reduced or the kept dims end in a stride-1 run.
  bool fast = ok && ((L.nr > 0 && L.rstride[size_t(L.nr - 1)] == 1) ||
                     (L.nk > 0 && L.kstride[size_t(L.nk - 1)] == 1) || L.nr == 0);
  if (!fast && x.numel() > 0 && L.n_out > 0) {
    Tensor c = x.contiguous();
    KILN_CHECK(make_layout(c, dims, L), "reduce", "input {} has too many dims", to_string(x.shape()));
    run_layout(L, static_cast<const In*>(c.data_ptr()), static_cast<Out*>(out.data_ptr()), op);
    return;
  }
  run_layout(L, static_cast<const In*>(x.data_ptr()), static_cast<Out*>(out.data_ptr()), op);
}

/// The plain version: one row-major pass over x, out index computed per element.
template <class Op>
void run_ref(const Tensor& x, const Tensor& out, const Shape& dims, const Op& op) {
  using Acc = typename Op::Acc;
  using In = typename Op::In;
  using Out = typename Op::Out;
  const int64_t nd = x.dim();
  std::vector<char> red(size_t(nd), 0);
  for (int64_t d : dims) red[size_t(d)] = 1;
  // Output strides over x's dims (0 for reduced dims).
  std::vector<int64_t> ost(size_t(nd), 0);
  int64_t n_out = 1;
  for (int64_t d = nd - 1; d >= 0; --d)
    if (!red[size_t(d)]) {
      ost[size_t(d)] = n_out;
      n_out *= x.shape()[d];
    }
  std::vector<Acc> acc(size_t(n_out), op.init());
  const In* xp = static_cast<const In*>(x.data_ptr());
  std::vector<int64_t> idx(size_t(nd), 0);
  for (int64_t e = 0; e < x.numel(); ++e) {
    int64_t xo = 0, o = 0;
    for (int64_t d = 0; d < nd; ++d) {
      xo += idx[size_t(d)] * x.strides()[d];
      o += idx[size_t(d)] * ost[size_t(d)];
    }
    acc[size_t(o)] = op.step(acc[size_t(o)], xp[xo]);
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < x.shape()[d]) break;
      idx[size_t(d)] = 0;
    }
  }
  Out* op_out = static_cast<Out*>(out.data_ptr());
  for (int64_t o = 0; o < n_out; ++o) op_out[o] = op.finish(acc[size_t(o)]);
}

}  // namespace kiln::backend::cpu::reduce_detail
