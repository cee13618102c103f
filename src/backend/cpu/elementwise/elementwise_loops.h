// The generic elementwise loops, one per arity, over cpu::for_each_run: a
// flat path when every operand is contiguous with out's shape (no
// broadcasting work at all), contiguous and stride-0 fast paths inside a run
// that auto-vectorize, and a strided fallback. ref:: twins walk the output
// element by element with plain index arithmetic.
#pragma once

#include "src/backend/cpu/loops.h"

// Inner loops inline every call in them (the functors and the math they use):
// GCC's inlining budget in a file with many instantiations would otherwise
// leave calls behind, and a call blocks vectorization.
#define KILN_FLATTEN __attribute__((flatten))

namespace kiln::backend::cpu {

namespace detail {

/// x's byte step when it can be read alongside a contiguous out as a flat
/// array: its item size when contiguous with out's shape, 0 when it holds a
/// single element (a broadcast scalar); -1 when it needs the strided walk.
inline int64_t flat_step(const Tensor& out, const Tensor& x) {
  if (x.shape() == out.shape() && x.is_contiguous()) return x.itemsize();
  return x.numel() == 1 ? 0 : -1;
}

/// Runs run(ptrs, itemsizes, n) over a flat range, in parallel when large.
template <int N, class Run>
void run_flat(const std::array<char*, N>& base, const std::array<int64_t, N>& isz, int64_t n, Run& run) {
  if (n <= kParallelGrain) {
    run(base, isz, n);
    return;
  }
  parallel_for(0, n, kParallelGrain, [&](int64_t lo, int64_t hi) {
    std::array<char*, N> p;
    for (int k = 0; k < N; ++k) p[k] = base[k] + lo * isz[k];
    run(p, isz, hi - lo);
  });
}

template <class T>
inline T& at(char* p, int64_t j, int64_t s) {
  return *reinterpret_cast<T*>(p + j * s);
}

}  // namespace detail

// Tag (unused) gives each per-ISA copy of the kernels its own instantiations
// (NOTE [Per-ISA kernels] in CMakeLists.txt): with one symbol for both copies
// the linker would keep one copy's loops for both.

/// out[i] = O(f(acc(x[i]))); x broadcasts to out.
template <class O, class A, class F, class Tag = void>
void unary_loop(const Tensor& out, const Tensor& x, const F& f) {
  using CA = acc_t<A>;
  auto run = [&f](std::array<char*, 2> p, std::array<int64_t, 2> s, int64_t n) KILN_FLATTEN {
    if (s[0] == sizeof(O) && s[1] == sizeof(A)) {
      O* o = reinterpret_cast<O*>(p[0]);
      const A* a = reinterpret_cast<const A*>(p[1]);
      for (int64_t j = 0; j < n; ++j) o[j] = O(f(CA(a[j])));
    } else if (s[0] == sizeof(O) && s[1] == 0) {
      O* o = reinterpret_cast<O*>(p[0]);
      const O v = O(f(CA(*reinterpret_cast<const A*>(p[1]))));
      for (int64_t j = 0; j < n; ++j) o[j] = v;
    } else {
      for (int64_t j = 0; j < n; ++j) detail::at<O>(p[0], j, s[0]) = O(f(CA(detail::at<A>(p[1], j, s[1]))));
    }
  };
  const int64_t sx = detail::flat_step(out, x);
  if (out.is_contiguous() && sx >= 0) {
    detail::run_flat<2>({static_cast<char*>(out.data_ptr()), static_cast<char*>(x.data_ptr())},
                        {int64_t(sizeof(O)), sx}, out.numel(), run);
  } else {
    for_each_run<2>({&out, &x}, run);
  }
}

/// out[i] = O(f(acc(a[i]), acc(b[i]))); a and b broadcast to out.
template <class O, class A, class B, class F, class Tag = void>
void binary_loop(const Tensor& out, const Tensor& a, const Tensor& b, const F& f) {
  using CA = acc_t<A>;
  using CB = acc_t<B>;
  auto run = [&f](std::array<char*, 3> p, std::array<int64_t, 3> s, int64_t n) KILN_FLATTEN {
    O* o = reinterpret_cast<O*>(p[0]);
    const A* x = reinterpret_cast<const A*>(p[1]);
    const B* y = reinterpret_cast<const B*>(p[2]);
    if (s[0] == sizeof(O) && s[1] == sizeof(A) && s[2] == sizeof(B)) {
      for (int64_t j = 0; j < n; ++j) o[j] = O(f(CA(x[j]), CB(y[j])));
    } else if (s[0] == sizeof(O) && s[1] == sizeof(A) && s[2] == 0) {
      const CB y0 = CB(y[0]);
      for (int64_t j = 0; j < n; ++j) o[j] = O(f(CA(x[j]), y0));
    } else if (s[0] == sizeof(O) && s[1] == 0 && s[2] == sizeof(B)) {
      const CA x0 = CA(x[0]);
      for (int64_t j = 0; j < n; ++j) o[j] = O(f(x0, CB(y[j])));
    } else {
      for (int64_t j = 0; j < n; ++j)
        detail::at<O>(p[0], j, s[0]) = O(f(CA(detail::at<A>(p[1], j, s[1])), CB(detail::at<B>(p[2], j, s[2]))));
    }
  };
  const int64_t sa = detail::flat_step(out, a), sb = detail::flat_step(out, b);
  if (out.is_contiguous() && sa >= 0 && sb >= 0) {
    detail::run_flat<3>({static_cast<char*>(out.data_ptr()), static_cast<char*>(a.data_ptr()),
                         static_cast<char*>(b.data_ptr())},
                        {int64_t(sizeof(O)), sa, sb}, out.numel(), run);
  } else {
    for_each_run<3>({&out, &a, &b}, run);
  }
}

/// out[i] = O(f(acc(a[i]), acc(b[i]), acc(c[i]))); all broadcast to out.
template <class O, class A, class B, class C, class F, class Tag = void>
void ternary_loop(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c, const F& f) {
  auto run = [&f](std::array<char*, 4> p, std::array<int64_t, 4> s, int64_t n) KILN_FLATTEN {
    if (s[0] == sizeof(O) && s[1] == sizeof(A) && s[2] == sizeof(B) && s[3] == sizeof(C)) {
      O* o = reinterpret_cast<O*>(p[0]);
      const A* x = reinterpret_cast<const A*>(p[1]);
      const B* y = reinterpret_cast<const B*>(p[2]);
      const C* z = reinterpret_cast<const C*>(p[3]);
      for (int64_t j = 0; j < n; ++j) o[j] = O(f(acc_t<A>(x[j]), acc_t<B>(y[j]), acc_t<C>(z[j])));
    } else {
      for (int64_t j = 0; j < n; ++j)
        detail::at<O>(p[0], j, s[0]) =
            O(f(acc_t<A>(detail::at<A>(p[1], j, s[1])), acc_t<B>(detail::at<B>(p[2], j, s[2])),
                acc_t<C>(detail::at<C>(p[3], j, s[3]))));
    }
  };
  const int64_t sa = detail::flat_step(out, a), sb = detail::flat_step(out, b), sc = detail::flat_step(out, c);
  if (out.is_contiguous() && sa >= 0 && sb >= 0 && sc >= 0) {
    detail::run_flat<4>({static_cast<char*>(out.data_ptr()), static_cast<char*>(a.data_ptr()),
                         static_cast<char*>(b.data_ptr()), static_cast<char*>(c.data_ptr())},
                        {int64_t(sizeof(O)), sa, sb, sc}, out.numel(), run);
  } else {
    for_each_run<4>({&out, &a, &b, &c}, run);
  }
}

namespace ref {

/// Element offset of operand t at out's multi-index idx (broadcast dims read
/// element 0).
inline int64_t offset_at(const Tensor& t, const Shape& idx) {
  int64_t off = 0, lead = int64_t(idx.size()) - t.dim();
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.shape()[d] != 1) off += idx[lead + d] * t.strides()[d];
  return off;
}

/// Calls visit(idx) for each multi-index of `shape` in row-major order.
template <class V>
void for_each_index(const Shape& shape, V&& visit) {
  int64_t nd = int64_t(shape.size());
  Shape idx = Shape::filled(size_t(nd), 0);
  for (int64_t e = 0, n = numel(shape); e < n; ++e) {
    visit(idx);
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

template <class O, class A, class F>
void unary_loop(const Tensor& out, const Tensor& x, const F& f) {
  O* o = static_cast<O*>(out.data_ptr());
  const A* a = static_cast<const A*>(x.data_ptr());
  for_each_index(out.shape(), [&](const Shape& i) { o[offset_at(out, i)] = O(f(acc_t<A>(a[offset_at(x, i)]))); });
}

template <class O, class A, class B, class F>
void binary_loop(const Tensor& out, const Tensor& x, const Tensor& y, const F& f) {
  O* o = static_cast<O*>(out.data_ptr());
  const A* a = static_cast<const A*>(x.data_ptr());
  const B* b = static_cast<const B*>(y.data_ptr());
  for_each_index(out.shape(), [&](const Shape& i) {
    o[offset_at(out, i)] = O(f(acc_t<A>(a[offset_at(x, i)]), acc_t<B>(b[offset_at(y, i)])));
  });
}

template <class O, class A, class B, class C, class F>
void ternary_loop(const Tensor& out, const Tensor& x, const Tensor& y, const Tensor& z, const F& f) {
  O* o = static_cast<O*>(out.data_ptr());
  const A* a = static_cast<const A*>(x.data_ptr());
  const B* b = static_cast<const B*>(y.data_ptr());
  const C* c = static_cast<const C*>(z.data_ptr());
  for_each_index(out.shape(), [&](const Shape& i) {
    o[offset_at(out, i)] =
        O(f(acc_t<A>(a[offset_at(x, i)]), acc_t<B>(b[offset_at(y, i)]), acc_t<C>(c[offset_at(z, i)])));
  });
}

}  // namespace ref

}  // namespace kiln::backend::cpu
