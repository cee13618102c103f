// The plain reference of the CPU gather/scatter, index_select/index_add, one-hot and index checks kernels (index.cpp): obvious loops the
// fast kernels are tested against.
#include "src/backend/cpu/index/index.h"

#include <atomic>
#include <cstring>

#include "src/backend/cpu/copy/copy.h"
#include "src/backend/cpu/loops.h"

namespace kiln::backend::cpu {

namespace ref {

namespace {
// Calls fn(idx) for every multi-index of shape in row-major order.
template <class F>
void for_each_index(const Shape& shape, F&& fn) {
  int64_t n = numel(shape), nd = int64_t(shape.size());
  Shape idx = Shape::filled(shape.size(), 0);
  for (int64_t e = 0; e < n; ++e) {
    fn(idx);
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < shape[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
}

int64_t offset(const Tensor& t, const Shape& idx) {
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
  return off;
}

int64_t index_at(const Tensor& index, const Shape& idx) {
  return dispatch(index.dtype(), [&](auto itag) -> int64_t {
    using I = typename decltype(itag)::type;
    return int64_t(static_cast<const I*>(index.data_ptr())[offset(index, idx)]);
  });
}
}  // namespace

void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    for_each_index(index.shape(), [&](const Shape& idx) {
      Shape src = idx;
      src[size_t(dim)] = index_at(index, idx);
      op[offset(out, idx)] = xp[offset(x, src)];
    });
  });
}

void scatter(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, ScatterMode mode) {
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* sp = static_cast<const T*>(src.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    for_each_index(index.shape(), [&](const Shape& idx) {
      Shape dst = idx;
      dst[size_t(dim)] = index_at(index, idx);
      T& o = op[offset(out, dst)];
      T v = sp[offset(src, idx)];
      o = mode == ScatterMode::add ? add_values(o, v) : v;
    });
  });
}

void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    for_each_index(out.shape(), [&](const Shape& idx) {
      Shape src = idx;
      Shape i{idx[size_t(dim)]};
      src[size_t(dim)] = index.dim() ? index_at(index, i) : index_at(index, Shape{});
      op[offset(out, idx)] = xp[offset(x, src)];
    });
  });
}

}  // namespace ref

}  // namespace kiln::backend::cpu
