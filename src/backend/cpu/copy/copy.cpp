// Strided copy with conversion, and fill.
#include "src/backend/cpu/copy/copy.h"

#include <cstring>

#include "src/backend/cpu/loops.h"

namespace kiln::backend::cpu {

namespace {
template <class D, class S>
D convert(S v) {
  if constexpr (std::is_same_v<D, bool>) return acc_t<S>(v) != acc_t<S>(0);
  else return D(acc_t<D>(acc_t<S>(v)));
}
}  // namespace

void copy(const Tensor& src, const Tensor& dst) {
  if (src.dtype() == dst.dtype() && src.shape() == dst.shape() && src.is_contiguous() && dst.is_contiguous()) {
    if (!src.is_same_storage(dst) || src.data_ptr() != dst.data_ptr())
      std::memmove(dst.data_ptr(), src.data_ptr(), size_t(dst.nbytes()));
    return;
  }
  dispatch(dst.dtype(), [&](auto dtag) {
    using D = typename decltype(dtag)::type;
    dispatch(src.dtype(), [&](auto stag) {
      using S = typename decltype(stag)::type;
      for_each_run<2>({&dst, &src}, [](std::array<char*, 2> p, std::array<int64_t, 2> s, int64_t n) {
        if (s[0] == sizeof(D) && s[1] == sizeof(S)) {
          D* o = reinterpret_cast<D*>(p[0]);
          const S* i = reinterpret_cast<const S*>(p[1]);
          for (int64_t j = 0; j < n; ++j) o[j] = convert<D>(i[j]);
        } else {
          for (int64_t j = 0; j < n; ++j)
            *reinterpret_cast<D*>(p[0] + j * s[0]) = convert<D>(*reinterpret_cast<const S*>(p[1] + j * s[1]));
        }
      });
    });
  });
}

void fill(const Tensor& dst, Scalar value) {
  dispatch(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = value.to<T>();
    for_each_run<1>({&dst}, [v](std::array<char*, 1> p, std::array<int64_t, 1> s, int64_t n) {
      if (s[0] == sizeof(T)) std::fill_n(reinterpret_cast<T*>(p[0]), n, v);
      else
        for (int64_t j = 0; j < n; ++j) *reinterpret_cast<T*>(p[0] + j * s[0]) = v;
    });
  });
}

namespace ref {
void copy(const Tensor& src, const Tensor& dst) {
  // Walk dst's multi-index; src is read with broadcast (stride-0) dims.
  int64_t nd = dst.dim(), off = nd - src.dim();
  Shape idx = Shape::filled(size_t(nd), 0);
  dispatch(dst.dtype(), [&](auto dtag) {
    using D = typename decltype(dtag)::type;
    dispatch(src.dtype(), [&](auto stag) {
      using S = typename decltype(stag)::type;
      D* o = static_cast<D*>(dst.data_ptr());
      const S* i = static_cast<const S*>(src.data_ptr());
      for (int64_t e = 0; e < dst.numel(); ++e) {
        int64_t od = 0, sd = 0;
        for (int64_t d = 0; d < nd; ++d) {
          od += idx[d] * dst.strides()[d];
          if (d >= off && src.shape()[d - off] != 1) sd += idx[d] * src.strides()[d - off];
        }
        o[od] = convert<D>(i[sd]);
        for (int64_t d = nd - 1; d >= 0; --d) {
          if (++idx[d] < dst.shape()[d]) break;
          idx[d] = 0;
        }
      }
    });
  });
}
}  // namespace ref

}  // namespace kiln::backend::cpu
