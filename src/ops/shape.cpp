// Views, layout changes and copies, with their vjps.
#include "kiln/ops/shape.h"

#include <numeric>

#include "kiln/core/size_check.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/device.h"
#include "kiln/ops/record.h"
#include "kiln/ops/reduce.h"
#include "src/backend/cpu/copy/copy.h"
#include "src/backend/gpu.h"
#include "src/ops/checks.h"

namespace kiln {

namespace {

Tensor alias(const Tensor& x, Shape shape, Strides strides, int64_t offset) {
  return Tensor::make_view(x.storage(), std::move(shape), std::move(strides), offset, x.dtype());
}

// Replaces a single -1 in `shape` so that it holds `n` elements.
Shape infer_shape(const char* op, const Shape& shape, int64_t n, const Shape& from) {
  Shape out = shape;
  int64_t known = 1, infer = -1;  // known: product of the non-zero sizes other than the -1, checked
  bool has_zero = false;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      KILN_CHECK(infer < 0, op, "only one dim may be -1, got shape {}", to_string(shape));
      infer = int64_t(i);
      continue;
    }
    KILN_CHECK(out[i] >= 0, op, "negative size {} in shape {}", out[i], to_string(shape));
    has_zero = has_zero || out[i] == 0;
    KILN_CHECK(out[i] == 0 || !__builtin_mul_overflow(known, out[i], &known), op,
               "shape {} has more than 2^63 elements", to_string(shape));
  }
  if (infer >= 0) {
    KILN_CHECK(!has_zero && n % known == 0, op, "shape {} is invalid for input {} of {} elements",
               to_string(shape), to_string(from), n);
    out[size_t(infer)] = n / known;
  }
  // Checks the strides of an empty shape too.
  KILN_CHECK(checked_numel(op, out) == n, op, "shape {} is invalid for input {} of {} elements", to_string(shape),
             to_string(from), n);
  return out;
}

// Strides for viewing (shape, strides) as new_shape without a copy, or false
// when impossible. Walks chunks of old dims that are contiguous among
// themselves and splits each chunk into the new dims it covers.
bool view_strides(const Shape& shape, const Strides& strides, const Shape& new_shape, Strides& out) {
  out = Strides::filled(new_shape.size(), 1);
  if (numel(shape) == 0 || shape.empty()) {
    out = contiguous_strides(new_shape);
    return true;
  }
  int64_t view_d = int64_t(new_shape.size()) - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

}  // namespace

Tensor view(const Tensor& x, const Shape& shape) {
  check_defined("view", x);
  Shape s = infer_shape("view", shape, x.numel(), x.shape());
  Strides st;
  KILN_CHECK(view_strides(x.shape(), x.strides(), s, st), "view",
             "input {} with strides {} cannot be viewed as {}; use reshape()", to_string(x.shape()),
             to_string(x.strides()), to_string(s));
  Tensor out = alias(x, s, st, x.storage_offset());
  if (needs_grad(x)) {
    record("view", {x}, {out}, {}, [in = x.shape()](const VjpArgs& a) -> Grads { return {reshape(a.grad(), in)}; });
  }
  return out;
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  check_defined("reshape", x);
  Shape s = infer_shape("reshape", shape, x.numel(), x.shape());
  Strides st;
  if (view_strides(x.shape(), x.strides(), s, st)) return view(x, s);
  return view(clone(x), s);
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  check_defined("transpose", x);
  int64_t d0 = wrap_dim("transpose", dim0, x.dim()), d1 = wrap_dim("transpose", dim1, x.dim());
  if (x.dim() == 0) return view(x, x.shape());  // recorded, unlike a bare alias
  Shape s = x.shape();
  Strides st = x.strides();
  std::swap(s[d0], s[d1]);
  std::swap(st[d0], st[d1]);
  Tensor out = alias(x, s, st, x.storage_offset());
  if (needs_grad(x))
    record("transpose", {x}, {out}, {}, [d0, d1](const VjpArgs& a) -> Grads { return {transpose(a.grad(), d0, d1)}; });
  return out;
}

Tensor permute(const Tensor& x, const Shape& dims) {
  check_defined("permute", x);
  int64_t n = x.dim();
  KILN_CHECK(int64_t(dims.size()) == n, "permute", "got {} dims {} for a tensor of shape {}", dims.size(),
             to_string(dims), to_string(x.shape()));
  Shape s = Shape::filled(size_t(n), 0), inv = Shape::filled(size_t(n), -1);
  Strides st = Strides::filled(size_t(n), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t d = wrap_dim("permute", dims[i], n);
    KILN_CHECK(inv[d] < 0, "permute", "dim {} repeated in {}", d, to_string(dims));
    inv[d] = i;
    s[i] = x.shape()[d];
    st[i] = x.strides()[d];
  }
  Tensor out = alias(x, s, st, x.storage_offset());
  if (needs_grad(x)) record("permute", {x}, {out}, {}, [inv](const VjpArgs& a) -> Grads { return {permute(a.grad(), inv)}; });
  return out;
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  check_defined("narrow", x);
  KILN_CHECK(x.dim() > 0, "narrow", "cannot narrow a 0-dim tensor");
  int64_t d = wrap_dim("narrow", dim, x.dim());
  int64_t n = x.shape()[d];
  if (start < 0) start += n;
  KILN_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow",
             "start {} and length {} are out of range for dim {} of size {} (shape {})", start, length, d, n,
             to_string(x.shape()));
  return slice(x, d, start, start + length, 1);
}

namespace {

// The vjp of slice: zeros of the input's shape with g in the slice.
Tensor slice_backward(const Tensor& g, const Shape& in_shape, int64_t dim, int64_t start, int64_t end,
                      int64_t step) {
  Tensor out = zeros(in_shape, {.dtype = g.dtype(), .device = g.device()});
  {
    NoGradGuard no_grad;
    KILN_LAUNCH("copy", backend::cpu::copy(g, slice(out, dim, start, end, step)));
  }
  if (needs_grad(g))
    record("slice_backward", {g}, {out}, {}, [=](const VjpArgs& a) -> Grads {
      return {slice(a.grad(), dim, start, end, step)};
    });
  return out;
}

}  // namespace

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  check_defined("slice", x);
  KILN_CHECK(x.dim() > 0, "slice", "cannot slice a 0-dim tensor");
  int64_t d = wrap_dim("slice", dim, x.dim());
  KILN_CHECK(step >= 1, "slice", "step must be positive, got {}", step);
  int64_t n = x.shape()[d];
  auto clampi = [n](int64_t i) { return i < 0 ? std::max<int64_t>(i + n, 0) : std::min(i, n); };
  start = clampi(start);
  end = std::max(clampi(end), start);
  Shape s = x.shape();
  Strides st = x.strides();
  s[d] = (end - start + step - 1) / step;
  st[d] = x.strides()[d] * step;
  Tensor out = alias(x, s, st, x.storage_offset() + start * x.strides()[d]);
  if (needs_grad(x))
    record("slice", {x}, {out}, {}, [in = x.shape(), d, start, end, step](const VjpArgs& a) -> Grads {
      return {slice_backward(a.grad(), in, d, start, end, step)};
    });
  return out;
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  check_defined("select", x);
  KILN_CHECK(x.dim() > 0, "select", "cannot index a 0-dim tensor");
  int64_t d = wrap_dim("select", dim, x.dim());
  int64_t n = x.shape()[d];
  KILN_CHECK(index >= -n && index < n, "select", "index {} is out of range for dim {} of size {} (shape {})",
             index, d, n, to_string(x.shape()));
  if (index < 0) index += n;
  Tensor narrowed = slice(x, d, index, index + 1, 1);
  return squeeze(narrowed, d);
}

Tensor expand(const Tensor& x, const Shape& shape) {
  check_defined("expand", x);
  int64_t n = int64_t(shape.size()), off = n - x.dim();
  KILN_CHECK(off >= 0, "expand", "cannot expand {} to fewer dims {}", to_string(x.shape()), to_string(shape));
  Shape s = Shape::filled(size_t(n), 0);
  Strides st = Strides::filled(size_t(n), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t want = shape[i];
    if (i < off) {
      KILN_CHECK(want >= 0, "expand", "size -1 is not allowed for the new leading dim {} in {}", i,
                 to_string(shape));
      s[i] = want;
      continue;
    }
    int64_t have = x.shape()[i - off];
    if (want == -1) want = have;
    KILN_CHECK(have == want || have == 1, "expand", "cannot expand {} to {} (dim {}: {} vs {})",
               to_string(x.shape()), to_string(shape), i, have, want);
    s[i] = want;
    st[i] = have == want ? x.strides()[i - off] : 0;
  }
  checked_numel("expand", s);
  Tensor out = alias(x, s, st, x.storage_offset());
  if (needs_grad(x))
    record("expand", {x}, {out}, {}, [in = x.shape()](const VjpArgs& a) -> Grads { return {sum_to(a.grad(), in)}; });
  return out;
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) { return expand(x, shape); }

Tensor squeeze(const Tensor& x) {
  check_defined("squeeze", x);
  Shape s;
  for (int64_t d : x.shape())
    if (d != 1) s.push_back(d);
  return s.size() == x.shape().size() ? view(x, x.shape()) : reshape(x, s);
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  check_defined("squeeze", x);
  if (x.dim() == 0) return view(x, x.shape());
  int64_t d = wrap_dim("squeeze", dim, x.dim());
  if (x.shape()[d] != 1) return view(x, x.shape());
  Shape s = x.shape();
  Strides st = x.strides();
  s.erase(size_t(d));
  st.erase(size_t(d));
  Tensor out = alias(x, s, st, x.storage_offset());
  if (needs_grad(x)) record("squeeze", {x}, {out}, {}, [d](const VjpArgs& a) -> Grads { return {unsqueeze(a.grad(), d)}; });
  return out;
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  check_defined("unsqueeze", x);
  int64_t d = wrap_dim("unsqueeze", dim, x.dim() + 1);
  Shape s = x.shape();
  Strides st = x.strides();
  int64_t stride = d < x.dim() ? x.strides()[d] * x.shape()[d] : 1;
  s.insert(size_t(d), 1);
  st.insert(size_t(d), stride);
  Tensor out = alias(x, s, st, x.storage_offset());
  if (needs_grad(x)) record("unsqueeze", {x}, {out}, {}, [d](const VjpArgs& a) -> Grads { return {squeeze(a.grad(), d)}; });
  return out;
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  check_defined("flatten", x);
  if (x.dim() == 0) return reshape(x, {1});
  int64_t s0 = wrap_dim("flatten", start_dim, x.dim()), s1 = wrap_dim("flatten", end_dim, x.dim());
  KILN_CHECK(s0 <= s1, "flatten", "start_dim {} comes after end_dim {}", start_dim, end_dim);
  Shape s;
  for (int64_t i = 0; i < s0; ++i) s.push_back(x.shape()[i]);
  int64_t m = 1;
  for (int64_t i = s0; i <= s1; ++i) m *= x.shape()[i];
  s.push_back(m);
  for (int64_t i = s1 + 1; i < x.dim(); ++i) s.push_back(x.shape()[i]);
  return reshape(x, s);
}

Tensor unflatten(const Tensor& x, int64_t dim, const Shape& sizes) {
  check_defined("unflatten", x);
  int64_t d = wrap_dim("unflatten", dim, x.dim());
  Shape inner = infer_shape("unflatten", sizes, x.shape()[d], Shape{x.shape()[d]});
  Shape s;
  for (int64_t i = 0; i < d; ++i) s.push_back(x.shape()[i]);
  for (int64_t v : inner) s.push_back(v);
  for (int64_t i = d + 1; i < x.dim(); ++i) s.push_back(x.shape()[i]);
  return reshape(x, s);
}

Tensor contiguous(const Tensor& x) {
  check_defined("contiguous", x);
  return x.is_contiguous() ? x : clone(x);
}

Tensor clone(const Tensor& x) {
  check_defined("clone", x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  KILN_LAUNCH("copy", backend::cpu::copy(x, out));
  if (needs_grad(x)) record("clone", {x}, {out}, {}, [](const VjpArgs& a) -> Grads { return {a.grad()}; });
  return out;
}

Tensor to(const Tensor& x, DType dtype) {
  check_defined("to", x);
  if (x.dtype() == dtype) return x;
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  KILN_LAUNCH("copy", backend::cpu::copy(x, out));
  if (is_floating(dtype) && needs_grad(x))
    record("to", {x}, {out}, {}, [from = x.dtype()](const VjpArgs& a) -> Grads { return {to(a.grad(), from)}; });
  return out;
}

Tensor to(const Tensor& x, Device device) {
  check_defined("to", x);
  if (x.device() == device) return x;
  // A move between devices: empty_for refuses a device this build has no
  // backend for, and only a GPU backend copies across devices.
  Tensor out = empty_for("to", x.shape(), x.dtype(), device);
  backend::gpu::copy("to", contiguous(x), out);
  if (needs_grad(x))
    record("to", {x}, {out}, {}, [from = x.device()](const VjpArgs& a) -> Grads { return {to(a.grad(), from)}; });
  return out;
}

Tensor copy_(const Tensor& dst, const Tensor& src) {
  check_defined("copy_", dst, "self");
  check_defined("copy_", src, "src");
  Shape b = broadcast_shapes("copy_", dst.shape(), src.shape());
  KILN_CHECK(b == dst.shape(), "copy_", "source {} does not broadcast to destination {}", to_string(src.shape()),
             to_string(dst.shape()));
  check_inplace("copy_", dst, needs_grad(src));
  KILN_LAUNCH("copy", backend::cpu::copy(src, dst));
  dst.storage()->bump_version();
  if (needs_grad(dst, src) && is_floating(dst.dtype()))
    record("copy_", {dst, src}, {dst}, {}, [src_shape = src.shape(), src_dtype = src.dtype()](const VjpArgs& a) -> Grads {
      return {zeros_like(a.grad()), a.needs(1) ? to(sum_to(a.grad(), src_shape), src_dtype) : Tensor()};
    });
  return dst;
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  check_defined("sum_to", x);
  if (x.shape() == shape) return x;
  int64_t lead = x.dim() - int64_t(shape.size());
  KILN_CHECK(lead >= 0, "sum_to", "cannot sum {} to the larger shape {}", to_string(x.shape()), to_string(shape));
  Shape dims;
  for (int64_t i = 0; i < x.dim(); ++i) {
    KILN_CHECK(i < lead || shape[i - lead] == 1 || shape[i - lead] == x.shape()[i], "sum_to",
               "cannot sum {} to {} (dim {}: {} vs {})", to_string(x.shape()), to_string(shape), i, x.shape()[i],
               shape[i - lead]);
    if (i < lead || (shape[i - lead] == 1 && x.shape()[i] != 1)) dims.push_back(i);
  }
  Tensor r = dims.empty() ? x : sum(x, dims, /*keepdim=*/true);
  return lead > 0 || r.shape() != shape ? reshape(r, shape) : r;
}

// ---- Tensor method shorthands ----
Tensor Tensor::view(const Shape& shape) const { return kiln::view(*this, shape); }
Tensor Tensor::reshape(const Shape& shape) const { return kiln::reshape(*this, shape); }
Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const { return kiln::transpose(*this, dim0, dim1); }
Tensor Tensor::t() const {
  KILN_CHECK(dim() <= 2, "t", "expects a tensor with <= 2 dims, got {}", to_string(shape()));
  return dim() < 2 ? kiln::view(*this, shape()) : kiln::transpose(*this, 0, 1);
}
Tensor Tensor::permute(const Shape& dims) const { return kiln::permute(*this, dims); }
Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const { return kiln::narrow(*this, dim, start, length); }
Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  return kiln::slice(*this, dim, start, end, step);
}
Tensor Tensor::select(int64_t dim, int64_t index) const { return kiln::select(*this, dim, index); }
Tensor Tensor::expand(const Shape& shape) const { return kiln::expand(*this, shape); }
Tensor Tensor::squeeze() const { return kiln::squeeze(*this); }
Tensor Tensor::squeeze(int64_t dim) const { return kiln::squeeze(*this, dim); }
Tensor Tensor::unsqueeze(int64_t dim) const { return kiln::unsqueeze(*this, dim); }
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const { return kiln::flatten(*this, start_dim, end_dim); }
Tensor Tensor::contiguous() const { return kiln::contiguous(*this); }
Tensor Tensor::clone() const { return kiln::clone(*this); }
Tensor Tensor::to(DType dtype) const { return kiln::to(*this, dtype); }

}  // namespace kiln
