// CPU sort / top-k along a dim: each row is copied into (value, position)
// pairs, ordered (NaN largest, ties by position, hence stable) and the first
// k written back. Rows run in parallel.
#include <algorithm>
#include <cmath>

#include "src/backend/cpu/index/index.h"
#include "src/backend/cpu/loops.h"

namespace kiln::backend::cpu {

namespace {

// t without `dim`: one element per row along dim, at the row's start.
Tensor rows_of(const Tensor& t, int64_t dim) {
  Shape s = t.shape();
  Strides st = t.strides();
  s.erase(size_t(dim));
  st.erase(size_t(dim));
  return Tensor::make_view(t.storage(), std::move(s), std::move(st), t.storage_offset(), t.dtype());
}

template <class A>
bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>) return std::isnan(v);
  else return false;
}

// Ascending order with NaN above everything; equal values keep their order.
struct Less {
  template <class P>
  bool operator()(const P& a, const P& b) const {
    bool an = is_nan(a.first), bn = is_nan(b.first);
    if (an || bn) return an == bn ? a.second < b.second : bn;
    return a.first < b.first || (a.first == b.first && a.second < b.second);
  }
};

// Descending order with NaN first; equal values keep their order.
struct Greater {
  template <class P>
  bool operator()(const P& a, const P& b) const {
    bool an = is_nan(a.first), bn = is_nan(b.first);
    if (an || bn) return an == bn ? a.second < b.second : an;
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  }
};

}  // namespace

void sort(const Tensor& x, int64_t dim, bool descending, const Tensor& values, const Tensor& indices) {
  const int64_t n = x.shape()[size_t(dim)], k = values.shape()[size_t(dim)];
  if (values.numel() == 0) return;
  Tensor xr = rows_of(x, dim), vr = rows_of(values, dim), ir = rows_of(indices, dim);
  const int64_t xs = x.strides()[size_t(dim)], vs = values.strides()[size_t(dim)], is = indices.strides()[size_t(dim)];
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    using P = std::pair<A, int64_t>;
    StridedLoop<3> L = make_loop<3>({&vr, &ir, &xr});
    int64_t grain = std::max<int64_t>(1, kParallelGrain / (4 * std::max<int64_t>(n, 1)));
    parallel_for(0, L.numel, grain, [&](int64_t lo, int64_t hi) {
      std::vector<P> buf(static_cast<size_t>(n));
      auto fn = [&](std::array<char*, 3> p, std::array<int64_t, 3> s, int64_t m) {
        for (int64_t r = 0; r < m; ++r) {
          T* vo = reinterpret_cast<T*>(p[0] + r * s[0]);
          int64_t* io = reinterpret_cast<int64_t*>(p[1] + r * s[1]);
          const T* xi = reinterpret_cast<const T*>(p[2] + r * s[2]);
          for (int64_t e = 0; e < n; ++e) buf[size_t(e)] = {A(xi[e * xs]), e};
          auto order = [&](auto cmp) {
            if (k < n) std::partial_sort(buf.begin(), buf.begin() + k, buf.end(), cmp);
            else std::sort(buf.begin(), buf.end(), cmp);
          };
          if (descending) order(Greater{});
          else order(Less{});
          for (int64_t e = 0; e < k; ++e) {
            vo[e * vs] = T(buf[size_t(e)].first);
            io[e * is] = buf[size_t(e)].second;
          }
        }
      };
      run_range<3>(L, lo, hi, fn);
    });
  });
}

}  // namespace kiln::backend::cpu
