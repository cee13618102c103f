// Shape helpers: checked element counts, strides, printing, dim wrapping, broadcasting.
#include "kiln/core/shape.h"

#include "kiln/core/error.h"
#include "kiln/core/size_check.h"

namespace kiln {

int64_t checked_numel(const char* op, std::span<const int64_t> shape) {
  // nonzero: the product of the non-zero sizes, what the strides reach; it
  // must fit even when a zero size makes the tensor empty.
  int64_t nonzero = 1;
  bool empty = false;
  for (int64_t d : shape) {
    KILN_CHECK(d >= 0, op, "negative size {} in shape {}", d, to_string(shape));
    empty = empty || d == 0;
    if (d != 0 && __builtin_mul_overflow(nonzero, d, &nonzero))
      KILN_FAIL(op, "shape {} has more than 2^63 elements{}", to_string(shape),
                std::find(shape.begin(), shape.end(), 0) != shape.end() ? " in its non-zero dims (strides overflow)"
                                                                        : "");
  }
  return empty ? 0 : nonzero;
}

Strides contiguous_strides(std::span<const int64_t> shape) {
  Strides s = Strides::filled(shape.size(), 1);
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= std::max<int64_t>(shape[i], 1);
  }
  return s;
}

std::string to_string(std::span<const int64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim) {
  int64_t n = std::max<int64_t>(ndim, 1);
  KILN_CHECK(dim >= -n && dim < n, op, "dim {} out of range for a tensor with {} dims", dim, ndim);
  return dim < 0 ? dim + n : dim;
}

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  if (a == b) return a;
  size_t n = std::max(a.size(), b.size());
  Shape out = Shape::filled(n, 1);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    KILN_CHECK(da == db || da == 1 || db == 1, op, "shapes {} and {} cannot be broadcast (dim {}: {} vs {})",
               to_string(a), to_string(b), int64_t(i) - int64_t(n), da, db);
    out[i] = da == 1 ? db : da;
  }
  int64_t n_out = 1;
  for (int64_t d : out)
    KILN_CHECK(d == 0 || !__builtin_mul_overflow(n_out, d, &n_out), op,
               "shapes {} and {} broadcast to {}, which has more than 2^63 elements", to_string(a), to_string(b),
               to_string(out));
  return out;
}

}  // namespace kiln
