// The plain reference of the CPU copy kernels (copy.cpp): obvious loops the
// fast kernels are tested against.
#include "src/backend/cpu/copy/copy.h"

#include <cstring>

#include "src/backend/cpu/loops.h"

namespace kiln::backend::cpu {

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
        o[od] = convert_value<D>(i[sd]);
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
