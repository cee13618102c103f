// Strided copy with conversion, and fill.
#include "src/backend/cpu/copy/copy.h"

#include <cstring>

#include "src/backend/cpu/loops.h"

namespace kiln::backend::cpu {

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
          for (int64_t j = 0; j < n; ++j) o[j] = convert_value<D>(i[j]);
        } else {
          for (int64_t j = 0; j < n; ++j)
            *reinterpret_cast<D*>(p[0] + j * s[0]) = convert_value<D>(*reinterpret_cast<const S*>(p[1] + j * s[1]));
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

}  // namespace kiln::backend::cpu
