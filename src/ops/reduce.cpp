// Reductions: argument checks, output shapes, forwards on the CPU kernels,
// and vjps.
#include "kiln/ops/reduce.h"

#include <limits>
#include <vector>

#include "kiln/ops/creation.h"
#include "kiln/ops/record.h"
#include "kiln/ops/shape.h"
#include "src/ops/cpu/loops.h"
#include "src/ops/cpu/reduce.h"

namespace kiln {

namespace {

void check_defined(const char* op, const Tensor& x) { KILN_CHECK(x.defined(), op, "input is an undefined tensor"); }

// Wrapped, sorted, unique reduced dims; empty `dims` means all dims.
Shape reduce_dims(const char* op, const Tensor& x, const Shape& dims) {
  const int64_t nd = x.dim();
  Shape out;
  if (dims.empty()) {
    for (int64_t d = 0; d < nd; ++d) out.push_back(d);
    return out;
  }
  std::vector<char> seen(size_t(std::max<int64_t>(nd, 1)), 0);
  for (int64_t d : dims) {
    int64_t w = wrap_dim(op, d, nd);
    if (nd == 0) continue;  // dims 0 / -1 of a scalar reduce nothing
    KILN_CHECK(!seen[size_t(w)], op, "dim {} appears multiple times in the list of dims {}", w, to_string(dims));
    seen[size_t(w)] = 1;
  }
  for (int64_t d = 0; d < nd; ++d)
    if (seen[size_t(d)]) out.push_back(d);
  return out;
}

// x's shape with `dims` removed, or set to 1 when keepdim.
Shape reduced_shape(const Shape& in, const Shape& dims, bool keepdim) {
  Shape out;
  size_t k = 0;
  for (int64_t d = 0; d < int64_t(in.size()); ++d) {
    if (k < dims.size() && dims[k] == d) {
      ++k;
      if (keepdim) out.push_back(1);
    } else {
      out.push_back(in[d]);
    }
  }
  return out;
}

int64_t reduced_numel(const Tensor& x, const Shape& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= x.shape()[d];
  return n;
}

// The vjp shape rule of a reduction: g (reduced shape) back to x's shape,
// repeated along the reduced dims (a stride-0 view).
Tensor expand_back(const Tensor& g, const Shape& in, const Shape& dims) {
  return expand(reshape(g, reduced_shape(in, dims, /*keepdim=*/true)), in);
}

DType sum_dtype(DType t) { return is_floating(t) ? t : kI64; }

// g * s for a floating g, differentiable (the vjp of "scale" is itself).
Tensor scale(const Tensor& g, double s) {
  Tensor out = Tensor::empty(g.shape(), g.dtype());
  dispatch(g.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_floating(dtype_v<T>)) {
      const acc_t<T> k = acc_t<T>(s);
      cpu::for_each_run<2>({&out, &g}, [k](std::array<char*, 2> p, std::array<int64_t, 2> st, int64_t n) {
        for (int64_t j = 0; j < n; ++j)
          *reinterpret_cast<T*>(p[0] + j * st[0]) = T(k * acc_t<T>(*reinterpret_cast<const T*>(p[1] + j * st[1])));
      });
    }
  });
  if (needs_grad(g)) record("scale", {g}, {out}, {}, [s](const VjpArgs& a) -> Grads { return {scale(a.grad(), s)}; });
  return out;
}

}  // namespace

// ---- sum / mean ----

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim, DType dtype) {
  check_defined("sum", x);
  Shape rd = reduce_dims("sum", x, dims);
  // The kernel sums floating x in its own dtype and anything else into i64;
  // other dtypes convert the input first (or the i64 result after).
  DType native = is_floating(dtype) ? dtype : kI64;
  Tensor src = x;
  if (sum_dtype(x.dtype()) != native) src = to(x, native);
  Tensor out = Tensor::empty(reduced_shape(x.shape(), rd, keepdim), native);
  cpu::sum(src, out, rd);
  if (needs_grad(src))
    record("sum", {src}, {out}, {}, [in = x.shape(), rd](const VjpArgs& a) -> Grads {
      return {expand_back(a.grad(), in, rd)};
    });
  return dtype == native ? out : to(out, dtype);
}

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) {
  check_defined("sum", x);
  return sum(x, dims, keepdim, sum_dtype(x.dtype()));
}

Tensor sum(const Tensor& x) { return sum(x, Shape{}, false); }

Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  check_defined("mean", x);
  KILN_CHECK(is_floating(x.dtype()), "mean",
             "could not infer output dtype: input dtype {} is integral or bool; convert it to a floating "
             "dtype first",
             name(x.dtype()));
  Shape rd = reduce_dims("mean", x, dims);
  const int64_t n = reduced_numel(x, rd);
  Tensor out = Tensor::empty(reduced_shape(x.shape(), rd, keepdim), x.dtype());
  // mean of nothing is NaN (0 / 0), as in PyTorch.
  cpu::sum(x, out, rd, n == 0 ? std::numeric_limits<double>::quiet_NaN() : 1.0 / double(n));
  if (needs_grad(x))
    record("mean", {x}, {out}, {}, [in = x.shape(), rd, n](const VjpArgs& a) -> Grads {
      return {scale(expand_back(a.grad(), in, rd), n == 0 ? 0.0 : 1.0 / double(n))};
    });
  return out;
}

Tensor mean(const Tensor& x) { return mean(x, Shape{}, false); }

}  // namespace kiln
