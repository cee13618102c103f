// CPU gather/scatter, index_select/index_add and index range checks, with the
// plain reference loops they are tested against.
#include "src/backend/cpu/index/index.h"

#include <atomic>
#include <cstring>

#include "src/backend/cpu/copy/copy.h"
#include "src/backend/cpu/dispatch.h"
#include "src/backend/cpu/loops.h"

namespace kiln::backend::cpu {

namespace {

// x seen with `shape` and x's strides, except stride 0 along dim: the element
// that index value 0 picks at each position (gather reads, scatter writes).
Tensor restrided(const Tensor& x, const Shape& shape, int64_t dim) {
  Strides st = x.strides();
  st[size_t(dim)] = 0;
  return Tensor::make_view(x.storage(), shape, std::move(st), x.storage_offset(), x.dtype());
}

// t with dim moved last (shape and strides), so that rows along dim are
// contiguous in the loop's flat order.
Tensor dim_last(const Tensor& t, int64_t dim) {
  Shape s = t.shape();
  Strides st = t.strides();
  int64_t n = s[size_t(dim)], stride = st[size_t(dim)];
  s.erase(size_t(dim));
  st.erase(size_t(dim));
  s.push_back(n);
  st.push_back(stride);
  return Tensor::make_view(t.storage(), std::move(s), std::move(st), t.storage_offset(), t.dtype());
}

// Runs fn over a loop whose innermost dim has length `len`, handing whole
// rows to one thread: writes of one row (which may collide through duplicate
// indices) happen in order and never race with another thread.
template <int N, class F>
void for_each_row(const std::array<const Tensor*, N>& ops, int64_t len, F&& fn) {
  StridedLoop<N> L = make_loop<N>(ops);
  if (L.numel == 0) return;
  int64_t rows = L.numel / len;
  parallel_for(0, rows, std::max<int64_t>(1, kParallelGrain / len),
               [&](int64_t lo, int64_t hi) { run_range<N>(L, lo * len, hi * len, fn); });
}

}  // namespace

std::optional<int64_t> find_bad_index(const Tensor& index, int64_t bound) {
  std::atomic<bool> bad{false};
  dispatch_only<int32_t, int64_t>(index.dtype(), [&](auto itag) {
    using I = typename decltype(itag)::type;
    for_each_run<1>({&index}, [&](std::array<char*, 1> p, std::array<int64_t, 1> s, int64_t n) {
      bool b = false;
      // One unsigned compare catches negatives too; no early exit so it vectorizes.
      if (s[0] == sizeof(I)) {
        const I* ix = reinterpret_cast<const I*>(p[0]);
        for (int64_t j = 0; j < n; ++j) b |= uint64_t(int64_t(ix[j])) >= uint64_t(bound);
      } else {
        for (int64_t j = 0; j < n; ++j)
          b |= uint64_t(int64_t(*reinterpret_cast<const I*>(p[0] + j * s[0]))) >= uint64_t(bound);
      }
      if (b) bad.store(true, std::memory_order_relaxed);
    });
  });
  if (!bad.load()) return std::nullopt;
  for (int64_t v : index.to_vector<int64_t>())  // the error path: find the first one
    if (v < 0 || v >= bound) return v;
  return std::nullopt;
}

int64_t max_index(const Tensor& index) {
  int64_t m = INT64_MIN;
  dispatch_only<int32_t, int64_t>(index.dtype(), [&](auto itag) {
    using I = typename decltype(itag)::type;
    StridedLoop<1> L = make_loop<1>({&index});
    auto fn = [&](std::array<char*, 1> p, std::array<int64_t, 1> s, int64_t n) {
      for (int64_t j = 0; j < n; ++j) m = std::max(m, int64_t(*reinterpret_cast<const I*>(p[0] + j * s[0])));
    };
    run_range<1>(L, 0, L.numel, fn);
  });
  return m;
}

void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  Tensor xv = restrided(x, index.shape(), dim);
  const int64_t step = x.strides()[size_t(dim)] * x.itemsize();  // bytes per index unit
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_only<int32_t, int64_t>(index.dtype(), [&](auto itag) {
      using I = typename decltype(itag)::type;
      for_each_run<3>({&out, &index, &xv}, [step](std::array<char*, 3> p, std::array<int64_t, 3> s, int64_t n) {
        if (s[0] == sizeof(T) && s[1] == sizeof(I)) {
          T* o = reinterpret_cast<T*>(p[0]);
          const I* ix = reinterpret_cast<const I*>(p[1]);
          for (int64_t j = 0; j < n; ++j) o[j] = *reinterpret_cast<const T*>(p[2] + j * s[2] + int64_t(ix[j]) * step);
        } else {
          for (int64_t j = 0; j < n; ++j) {
            int64_t i = int64_t(*reinterpret_cast<const I*>(p[1] + j * s[1]));
            *reinterpret_cast<T*>(p[0] + j * s[0]) = *reinterpret_cast<const T*>(p[2] + j * s[2] + i * step);
          }
        }
      });
    });
  });
}

void scatter(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, ScatterMode mode) {
  const int64_t len = index.shape()[size_t(dim)];
  if (len == 0) return;
  Tensor iv = dim_last(index, dim);
  Tensor sv = dim_last(Tensor::make_view(src.storage(), index.shape(), src.strides(), src.storage_offset(), src.dtype()), dim);
  Tensor ov = dim_last(restrided(out, index.shape(), dim), dim);
  const int64_t step = out.strides()[size_t(dim)] * out.itemsize();
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_only<int32_t, int64_t>(index.dtype(), [&](auto itag) {
      using I = typename decltype(itag)::type;
      for_each_row<3>({&iv, &sv, &ov}, len, [&](std::array<char*, 3> p, std::array<int64_t, 3> s, int64_t n) {
        for (int64_t j = 0; j < n; ++j) {
          int64_t i = int64_t(*reinterpret_cast<const I*>(p[0] + j * s[0]));
          T v = *reinterpret_cast<const T*>(p[1] + j * s[1]);
          T& o = *reinterpret_cast<T*>(p[2] + j * s[2] + i * step);
          o = mode == ScatterMode::add ? add_values(o, v) : v;
        }
      });
    });
  });
}

void scatter_fill(const Tensor& out, int64_t dim, const Tensor& index, Scalar value) {
  const int64_t len = index.shape()[size_t(dim)];
  if (len == 0) return;
  Tensor iv = dim_last(index, dim);
  Tensor ov = dim_last(restrided(out, index.shape(), dim), dim);
  const int64_t step = out.strides()[size_t(dim)] * out.itemsize();
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = value.to<T>();
    dispatch_only<int32_t, int64_t>(index.dtype(), [&](auto itag) {
      using I = typename decltype(itag)::type;
      for_each_row<2>({&iv, &ov}, len, [&](std::array<char*, 2> p, std::array<int64_t, 2> s, int64_t n) {
        for (int64_t j = 0; j < n; ++j) {
          int64_t i = int64_t(*reinterpret_cast<const I*>(p[0] + j * s[0]));
          *reinterpret_cast<T*>(p[1] + j * s[1] + i * step) = v;
        }
      });
    });
  });
}

void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  const int64_t istride = index.dim() ? index.strides()[0] : 0;
  if (!x.is_contiguous()) {
    // A gather whose index is the 1-D index broadcast over out's shape.
    Strides st = Strides::filled(out.shape().size(), 0);
    st[size_t(dim)] = istride;
    gather(x, dim, Tensor::make_view(index.storage(), out.shape(), st, index.storage_offset(), index.dtype()), out);
    return;
  }
  // x contiguous: out row (o, i) is x row (o, index[i]), `inner` elements long.
  const int64_t n = index.numel(), size = x.shape()[size_t(dim)];
  const int64_t inner = numel(std::span<const int64_t>(x.shape()).subspan(size_t(dim) + 1));
  const int64_t rows = out.numel() / std::max<int64_t>(inner, 1);
  if (out.numel() == 0) return;
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_only<int32_t, int64_t>(index.dtype(), [&](auto itag) {
      using I = typename decltype(itag)::type;
      const T* xp = static_cast<const T*>(x.data_ptr());
      T* op = static_cast<T*>(out.data_ptr());
      const I* ix = static_cast<const I*>(index.data_ptr());
      parallel_for(0, rows, std::max<int64_t>(1, kParallelGrain / inner), [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
          int64_t o = r / n, i = r - o * n;
          const T* src = xp + (o * size + int64_t(ix[i * istride])) * inner;
          if (inner == 1) op[r] = *src;
          else std::memcpy(op + r * inner, src, size_t(inner) * sizeof(T));
        }
      });
    });
  });
}

void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src_in) {
  Tensor src = src_in;
  if (!src.is_contiguous()) {
    src = Tensor::empty(src_in.shape(), src_in.dtype());
    copy(src_in, src);
  }
  const int64_t n = index.numel(), size = out.shape()[size_t(dim)];
  const int64_t inner = numel(std::span<const int64_t>(out.shape()).subspan(size_t(dim) + 1));
  const int64_t outer = numel(std::span<const int64_t>(out.shape()).first(size_t(dim)));
  if (n == 0 || inner == 0 || outer == 0) return;
  const int64_t istride = index.dim() ? index.strides()[0] : 0;
  // Tasks are (outer row, block of columns); each walks every index in order,
  // so duplicates accumulate without races.
  const int64_t block = std::min<int64_t>(inner, 512), blocks = (inner + block - 1) / block;
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_only<int32_t, int64_t>(index.dtype(), [&](auto itag) {
      using I = typename decltype(itag)::type;
      T* op = static_cast<T*>(out.data_ptr());
      const T* sp = static_cast<const T*>(src.data_ptr());
      const I* ix = static_cast<const I*>(index.data_ptr());
      parallel_for(0, outer * blocks, std::max<int64_t>(1, kParallelGrain / (n * block)), [&](int64_t lo, int64_t hi) {
        for (int64_t t = lo; t < hi; ++t) {
          int64_t o = t / blocks, c0 = (t - o * blocks) * block, c1 = std::min(inner, c0 + block);
          for (int64_t i = 0; i < n; ++i) {
            T* d = op + (o * size + int64_t(ix[i * istride])) * inner;
            const T* s = sp + (o * n + i) * inner;
            for (int64_t c = c0; c < c1; ++c) d[c] = add_values(d[c], s[c]);
          }
        }
      });
    });
  });
}

}  // namespace kiln::backend::cpu
