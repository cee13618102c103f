// Creation ops.
#include "kiln/ops/creation.h"

#include "kiln/core/replay.h"

#include <cmath>
#include <cstring>

#include "kiln/core/size_check.h"
#include "src/backend/cpu/copy/copy.h"

namespace kiln {

namespace {
Tensor finish(Tensor t, const TensorOptions& opts) {
  if (opts.requires_grad) t.requires_grad_(true);
  return t;
}

Tensor zeros_named(const char* op, const Shape& shape, TensorOptions opts) {
  Tensor t = empty_for(op, shape, opts.dtype, opts.device);
  KILN_LAUNCH(op, std::memset(t.data_ptr(), 0, size_t(t.nbytes())));
  return t;
}
}  // namespace

Tensor empty(const Shape& shape, TensorOptions opts) {
  return finish(empty_for("empty", shape, opts.dtype, opts.device), opts);
}

Tensor full(const Shape& shape, Scalar value, TensorOptions opts) {
  Tensor t = empty_for("full", shape, opts.dtype, opts.device);
  KILN_LAUNCH("fill", backend::cpu::fill(t, value));
  return finish(t, opts);
}

Tensor zeros(const Shape& shape, TensorOptions opts) { return finish(zeros_named("zeros", shape, opts), opts); }

Tensor ones(const Shape& shape, TensorOptions opts) { return full(shape, 1, opts); }
Tensor empty_like(const Tensor& like) { return Tensor::empty(like.shape(), like.dtype(), like.device()); }
Tensor zeros_like(const Tensor& like) { return zeros(like.shape(), {.dtype = like.dtype(), .device = like.device()}); }
Tensor ones_like(const Tensor& like) { return full(like.shape(), 1, {.dtype = like.dtype(), .device = like.device()}); }
Tensor full_like(const Tensor& like, Scalar value) {
  return full(like.shape(), value, {.dtype = like.dtype(), .device = like.device()});
}

Tensor arange(Scalar end) { return arange(0, end, 1); }

Tensor arange(Scalar start, Scalar end, Scalar step) {
  bool fractional = start.is_floating() || end.is_floating() || step.is_floating();
  return arange(start, end, step, {.dtype = fractional ? kF32 : kI64});
}

Tensor arange(Scalar start, Scalar end, Scalar step, TensorOptions opts) {
  double s = start.to_double(), e = end.to_double(), st = step.to_double();
  KILN_CHECK(st != 0, "arange", "step must be nonzero");
  KILN_CHECK((st > 0 && e >= s) || (st < 0 && e <= s), "arange",
             "upper bound {} and step {} are inconsistent with start {}", e, st, s);
  // The count as a double first: converting one beyond int64 (or NaN) to int64 is undefined.
  const double count = std::ceil((e - s) / st);
  KILN_CHECK(std::isfinite(count) && count < 0x1p62, "arange", "[{}, {}) in steps of {} has {} elements, too many",
             s, e, st, count);
  int64_t n = int64_t(count);
  Tensor t = empty_for("arange", {n}, opts.dtype, opts.device);
  // Read only for integer dtypes: a floating bound beyond int64 must not be converted.
  const bool integral = !is_floating(opts.dtype);
  const int64_t is = integral ? start.to_int() : 0, ist = integral ? step.to_int() : 0;
  KILN_LAUNCH("arange", dispatch(opts.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = t.data<T>();
    if constexpr (std::is_integral_v<T>) {
      for (int64_t i = 0; i < n; ++i) p[i] = T(is + i * ist);
    } else {
      for (int64_t i = 0; i < n; ++i) p[i] = T(s + double(i) * st);
    }
  }));
  return finish(t, opts);
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions opts) {
  KILN_CHECK(steps >= 0, "linspace", "number of steps must be non-negative, got {}", steps);
  Tensor t = empty_for("linspace", {steps}, opts.dtype, opts.device);
  double step = steps > 1 ? (end - start) / double(steps - 1) : 0.0;
  KILN_LAUNCH("linspace", dispatch(opts.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = t.data<T>();
    // Like torch: the first half counts up from start, the second half down
    // from end, so both endpoints are exact.
    int64_t half = steps / 2;
    for (int64_t i = 0; i < steps; ++i)
      p[i] = T(i < half || steps == 1 ? start + step * double(i) : end - step * double(steps - 1 - i));
  }));
  return finish(t, opts);
}

Tensor eye(int64_t n, int64_t m, TensorOptions opts) {
  if (m < 0) m = n;
  KILN_CHECK(n >= 0, "eye", "n must be non-negative, got {}", n);
  Tensor t = zeros_named("eye", {n, m}, opts);
  KILN_LAUNCH("eye", dispatch(opts.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = t.data<T>();
    for (int64_t i = 0; i < std::min(n, m); ++i) p[i * m + i] = T(1);
  }));
  return finish(t, opts);
}

template <class T>
Tensor tensor(const std::vector<T>& data, const Shape& shape) {
  const int64_t n = checked_numel("tensor", shape);
  KILN_CHECK(int64_t(data.size()) == n, "tensor", "{} values do not fill shape {} ({} elements)", data.size(),
             to_string(shape), n);
  Tensor t = empty_for("tensor", shape, dtype_v<T>);
  // A recorded launch holds its own copy of the values (a constant of the step).
  KILN_LAUNCH("tensor", if constexpr (std::is_same_v<T, bool>) {
    bool* p = t.data<bool>();
    for (size_t i = 0; i < data.size(); ++i) p[i] = data[i];
  } else {
    if (!data.empty()) std::memcpy(t.data_ptr(), data.data(), data.size() * sizeof(T));
  });
  return t;
}

template Tensor tensor<bool>(const std::vector<bool>&, const Shape&);
template Tensor tensor<uint8_t>(const std::vector<uint8_t>&, const Shape&);
template Tensor tensor<int32_t>(const std::vector<int32_t>&, const Shape&);
template Tensor tensor<int64_t>(const std::vector<int64_t>&, const Shape&);
template Tensor tensor<bfloat16>(const std::vector<bfloat16>&, const Shape&);
template Tensor tensor<float>(const std::vector<float>&, const Shape&);
template Tensor tensor<double>(const std::vector<double>&, const Shape&);

Tensor scalar_tensor(Scalar value, TensorOptions opts) { return full({}, value, opts); }

Tensor scalar_tensor(Scalar value) {
  DType dt = value.is_floating() ? kF32 : value.is_integral() ? kI64 : kBool;
  return full({}, value, {.dtype = dt});
}

Tensor from_buffer(const void* data, const Shape& shape, DType dtype) {
  Tensor t = empty_for("from_buffer", shape, dtype);
  if (t.nbytes()) std::memcpy(t.data_ptr(), data, size_t(t.nbytes()));
  return t;
}

Tensor from_blob(void* data, const Shape& shape, DType dtype, void (*deleter)(void*, void*), void* ctx) {
  auto storage = std::make_shared<Storage>(data, size_t(checked_nbytes("from_blob", shape, dtype)), kCPU, deleter, ctx);
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), shape, contiguous_strides(shape), 0, dtype));
}

void copy_to_buffer(const Tensor& src, void* dst) {
  Tensor out = from_blob(dst, src.shape(), src.dtype());
  KILN_LAUNCH("copy", backend::cpu::copy(src, out));
}

}  // namespace kiln
