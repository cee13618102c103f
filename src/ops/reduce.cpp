// Reductions: argument checks, output shapes, forwards on the CPU kernels,
// and vjps.
#include "kiln/ops/reduce.h"

#include <limits>
#include <vector>

#include <cmath>

#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/index.h"
#include "kiln/ops/record.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"
#include "src/backend/cpu/reduce/reduce.h"
#include "src/ops/checks.h"

namespace kiln {

namespace {


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
  Tensor out = Tensor::empty(reduced_shape(x.shape(), rd, keepdim), native, x.device());
  KILN_LAUNCH("sum", backend::cpu::sum(src, out, rd));
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
  Tensor out = Tensor::empty(reduced_shape(x.shape(), rd, keepdim), x.dtype(), x.device());
  // mean of nothing is NaN (0 / 0), as in PyTorch.
  KILN_LAUNCH("sum", backend::cpu::sum(x, out, rd, n == 0 ? std::numeric_limits<double>::quiet_NaN() : 1.0 / double(n)));
  if (needs_grad(x))
    record("mean", {x}, {out}, {}, [in = x.shape(), rd, n](const VjpArgs& a) -> Grads {
      return {mul(expand_back(a.grad(), in, rd), n == 0 ? 0.0 : 1.0 / double(n))};
    });
  return out;
}

Tensor mean(const Tensor& x) { return mean(x, Shape{}, false); }

// ---- prod ----

namespace {

// d prod / d x_i = prod of the others. Where x has no zero in the slice that
// is out / x; where the slice has one zero, only that zero gets a gradient
// (the product of the nonzeros); with two or more zeros everything is 0.
Tensor prod_backward(const Tensor& g, const Tensor& x, const Tensor& out, int64_t dim) {
  Tensor zero = eq(x, 0);
  Tensor x_safe = where(zero, 1.0, x);
  Tensor prod_nonzero = prod(x_safe, dim, /*keepdim=*/true);
  Tensor one_zero = eq(sum(zero, {dim}, /*keepdim=*/true), 1);
  Tensor at_zero = where(one_zero, prod_nonzero, 0.0);
  return g * where(zero, at_zero, div(out, x_safe));
}

}  // namespace

Tensor prod(const Tensor& x, int64_t dim, bool keepdim) {
  check_defined("prod", x);
  int64_t d = wrap_dim("prod", dim, x.dim());
  Shape rd = x.dim() == 0 ? Shape{} : Shape{d};
  Tensor out = Tensor::empty(reduced_shape(x.shape(), rd, keepdim), sum_dtype(x.dtype()), x.device());
  KILN_LAUNCH("prod", backend::cpu::prod(x, out, rd));
  if (needs_grad(x))
    record("prod", {x}, {out}, {x, out}, [rd, keepdim](const VjpArgs& a) -> Grads {
      const Tensor& x = a.saved[0];
      if (x.dim() == 0) return {a.grad()};  // prod of one element is itself
      Shape kshape = reduced_shape(x.shape(), rd, true);
      Tensor g = reshape(a.grad(), kshape), out = reshape(a.saved[1], kshape);
      return {prod_backward(g, x, out, rd[0])};
    });
  return out;
}

Tensor prod(const Tensor& x) {
  check_defined("prod", x);
  return prod(reshape(x, {-1}), 0, false);
}

// ---- max / min ----

namespace {

void check_nonempty_dim(const char* op, const Tensor& x, int64_t d) {
  KILN_CHECK(x.dim() == 0 || x.shape()[d] > 0, op,
             "cannot reduce dim {} of size 0 of input {} (the reduction has no identity)", d, to_string(x.shape()));
}

// Gradient of a pick along dim: g at x's index `idx` (keepdim shape), 0 elsewhere.
Tensor pick_backward(const Tensor& g, const Tensor& idx, const Shape& in, int64_t dim) {
  if (in.empty()) return g;
  Shape ashape = Shape::filled(in.size(), 1);
  ashape[size_t(dim)] = in[size_t(dim)];
  Tensor pos = reshape(arange(0, in[size_t(dim)], 1, {.dtype = kI64, .device = g.device()}), ashape);
  return where(eq(pos, idx), g, 0.0);
}

template <bool Max>
std::pair<Tensor, Tensor> max_min_dim(const char* op, const Tensor& x, int64_t dim, bool keepdim) {
  check_defined(op, x);
  int64_t d = wrap_dim(op, dim, x.dim());
  check_nonempty_dim(op, x, d);
  Shape rd = x.dim() == 0 ? Shape{} : Shape{d};
  Shape kshape = reduced_shape(x.shape(), rd, true);
  Tensor values = Tensor::empty(reduced_shape(x.shape(), rd, keepdim), x.dtype(), x.device());
  Tensor indices = Tensor::empty(values.shape(), kI64, x.device());
  if (Max) KILN_LAUNCH("max_dim", backend::cpu::max_dim(x, d, values, indices));
  else KILN_LAUNCH("min_dim", backend::cpu::min_dim(x, d, values, indices));
  if (needs_grad(x))
    record(op, {x}, {values}, {indices}, [in = x.shape(), kshape, d](const VjpArgs& a) -> Grads {
      return {pick_backward(reshape(a.grad(), kshape), reshape(a.saved[0], kshape), in, d)};
    });
  return {values, indices};
}

}  // namespace

std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  return max_min_dim<true>("max", x, dim, keepdim);
}
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  return max_min_dim<false>("min", x, dim, keepdim);
}

namespace {

template <bool Max>
Tensor arg_dim(const char* op, const Tensor& x, int64_t dim, bool keepdim) {
  check_defined(op, x);
  int64_t d = wrap_dim(op, dim, x.dim());
  check_nonempty_dim(op, x, d);
  Shape rd = x.dim() == 0 ? Shape{} : Shape{d};
  Tensor indices = Tensor::empty(reduced_shape(x.shape(), rd, keepdim), kI64, x.device());
  if (Max) KILN_LAUNCH("max_dim", backend::cpu::max_dim(x, d, Tensor(), indices));
  else KILN_LAUNCH("min_dim", backend::cpu::min_dim(x, d, Tensor(), indices));
  return indices;
}

template <bool Max>
Tensor arg_all(const char* op, const Tensor& x) {
  check_defined(op, x);
  KILN_CHECK(x.numel() > 0, op, "cannot reduce the empty input {} (the reduction has no identity); give a dim",
             to_string(x.shape()));
  return reshape(arg_dim<Max>(op, reshape(x.detach(), {-1}), 0, false), Shape{});
}

}  // namespace

Tensor argmax(const Tensor& x) { return arg_all<true>("argmax", x); }
Tensor argmin(const Tensor& x) { return arg_all<false>("argmin", x); }
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) { return arg_dim<true>("argmax", x, dim, keepdim); }
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) { return arg_dim<false>("argmin", x, dim, keepdim); }

// ---- amax / amin ----

namespace {

template <bool Max>
Tensor amax_amin(const char* op, const Tensor& x, const Shape& dims, bool keepdim) {
  check_defined(op, x);
  Shape rd = reduce_dims(op, x, dims);
  for (int64_t d : rd) check_nonempty_dim(op, x, d);
  Tensor out = Tensor::empty(reduced_shape(x.shape(), rd, keepdim), x.dtype(), x.device());
  if (Max) KILN_LAUNCH("amax", backend::cpu::amax(x, out, rd));
  else KILN_LAUNCH("amin", backend::cpu::amin(x, out, rd));
  if (needs_grad(x))
    record(op, {x}, {out}, {x, out}, [rd](const VjpArgs& a) -> Grads {
      // Shared evenly among the elements equal to the extreme (the NaNs when it is NaN).
      const Tensor& x = a.saved[0];
      Tensor ext = expand_back(a.saved[1], x.shape(), rd);
      Tensor hit = logical_or(eq(x, ext), logical_and(isnan(x), isnan(ext)));
      Tensor count = sum(hit, rd, /*keepdim=*/true);
      Tensor g = div(reshape(a.grad(), reduced_shape(x.shape(), rd, true)), count);
      return {where(hit, g, 0.0)};
    });
  return out;
}

}  // namespace

Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) { return amax_amin<true>("amax", x, dims, keepdim); }
Tensor amin(const Tensor& x, const Shape& dims, bool keepdim) { return amax_amin<false>("amin", x, dims, keepdim); }

// Full max / min: amax / amin over every dim (ties share the gradient, as
// PyTorch's max() does).
Tensor max(const Tensor& x) {
  check_defined("max", x);
  KILN_CHECK(x.numel() > 0, "max", "cannot reduce the empty input {} (the reduction has no identity); give a dim",
             to_string(x.shape()));
  return amax_amin<true>("max", x, {}, false);
}
Tensor min(const Tensor& x) {
  check_defined("min", x);
  KILN_CHECK(x.numel() > 0, "min", "cannot reduce the empty input {} (the reduction has no identity); give a dim",
             to_string(x.shape()));
  return amax_amin<false>("min", x, {}, false);
}

// ---- var / std ----

namespace {

void check_floating(const char* op, const Tensor& x) {
  KILN_CHECK(is_floating(x.dtype()), op, "expects a floating input, got {} {}", name(x.dtype()),
             to_string(x.shape()));
}

// d var / d x = 2 (x - mean) / (N - correction), times g.
Tensor var_backward(const Tensor& g, const Tensor& x, const Shape& rd, int64_t correction) {
  int64_t n = reduced_numel(x, rd);
  double k = 2.0 / double(n - correction);
  Tensor gk = reshape(g, reduced_shape(x.shape(), rd, true));
  return mul(gk * (x - mean(x, rd, /*keepdim=*/true)), k);
}

Tensor var_forward(const Tensor& x, const Shape& rd, int64_t correction, bool keepdim) {
  NoGradGuard no_grad;
  int64_t n = reduced_numel(x, rd);
  Tensor dev = x - mean(x, rd, /*keepdim=*/true);
  // N - correction <= 0 divides by 0 (NaN or inf, as in PyTorch).
  return div(sum(dev * dev, rd, keepdim), double(std::max<int64_t>(n - correction, 0)));
}

}  // namespace

Tensor var(const Tensor& x, const Shape& dims, bool unbiased, bool keepdim) {
  check_defined("var", x);
  check_floating("var", x);
  Shape rd = reduce_dims("var", x, dims);
  int64_t c = unbiased ? 1 : 0;
  Tensor out = var_forward(x, rd, c, keepdim);
  if (needs_grad(x))
    record("var", {x}, {out}, {x}, [rd, c](const VjpArgs& a) -> Grads {
      return {var_backward(a.grad(), a.saved[0], rd, c)};
    });
  return out;
}

Tensor var(const Tensor& x, bool unbiased) { return var(x, Shape{}, unbiased, false); }

Tensor std(const Tensor& x, const Shape& dims, bool unbiased, bool keepdim) {
  check_defined("std", x);
  check_floating("std", x);
  Shape rd = reduce_dims("std", x, dims);
  int64_t c = unbiased ? 1 : 0;
  Tensor out;
  {
    NoGradGuard no_grad;
    out = sqrt(var_forward(x, rd, c, keepdim));
  }
  if (needs_grad(x))
    record("std", {x}, {out}, {x, out}, [rd, c](const VjpArgs& a) -> Grads {
      // d std = d var / (2 std); 0 where std is 0 (PyTorch's choice).
      const Tensor& out = a.saved[1];
      Tensor gv = where(eq(out, 0), 0.0, a.grad() / (out * 2.0));
      return {var_backward(gv, a.saved[0], rd, c)};
    });
  return out;
}

Tensor std(const Tensor& x, bool unbiased) { return std(x, Shape{}, unbiased, false); }

Tensor var(const Tensor& x, std::initializer_list<int64_t> dims, bool unbiased, bool keepdim) {
  return var(x, Shape(dims), unbiased, keepdim);
}
Tensor std(const Tensor& x, std::initializer_list<int64_t> dims, bool unbiased, bool keepdim) {
  return std(x, Shape(dims), unbiased, keepdim);
}

// ---- norm ----

namespace {

Tensor norm_backward(const Tensor& g0, const Tensor& x, const Tensor& norm0, const Shape& rd, double p) {
  Shape kshape = reduced_shape(x.shape(), rd, true);
  Tensor g = reshape(g0, kshape), nrm = reshape(norm0, kshape);
  if (p == 0) return zeros_like(x);
  if (p == 1) return sign(x) * g;
  if (std::isinf(p)) {  // shared among the elements at the extreme |x|
    Tensor hit = eq(abs(x), nrm);
    return sign(x) * where(hit, g / sum(hit, rd, /*keepdim=*/true), 0.0);
  }
  Tensor at_zero = eq(nrm, 0);
  if (p == 2) return x * where(at_zero, 0.0, g / nrm);
  if (p < 1) {
    Tensor scaled = where(eq(x, 0), 0.0, sign(x) * pow(abs(x), p - 1));
    return scaled * g * pow(nrm, 1 - p);
  }
  Tensor scaled = p < 2 ? sign(x) * pow(abs(x), p - 1) : x * pow(abs(x), p - 2);
  return scaled * where(at_zero, 0.0, g / pow(nrm, p - 1));
}

}  // namespace

Tensor norm(const Tensor& x, double p, const Shape& dims, bool keepdim) {
  check_defined("norm", x);
  check_floating("norm", x);
  KILN_CHECK(!std::isnan(p), "norm", "p must be a number, got nan");
  Shape rd = reduce_dims("norm", x, dims);
  if (std::isinf(p) && p < 0)  // min |x| has no identity
    for (int64_t d : rd) check_nonempty_dim("norm", x, d);
  Tensor out = Tensor::empty(reduced_shape(x.shape(), rd, keepdim), x.dtype(), x.device());
  KILN_LAUNCH("norm", backend::cpu::norm(x, out, rd, p));
  if (needs_grad(x))
    record("norm", {x}, {out}, {x, out}, [rd, p](const VjpArgs& a) -> Grads {
      return {norm_backward(a.grad(), a.saved[0], a.saved[1], rd, p)};
    });
  return out;
}

Tensor norm(const Tensor& x, double p) { return norm(x, p, Shape{}, false); }

// ---- logsumexp ----

Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim) {
  check_defined("logsumexp", x);
  Tensor xf = is_floating(x.dtype()) ? x : to(x, kF32);
  Shape rd = reduce_dims("logsumexp", xf, dims);
  Shape out_shape = reduced_shape(x.shape(), rd, keepdim);
  Tensor out = Tensor::empty(out_shape, xf.dtype(), xf.device());
  if (rd.size() <= 1) {
    KILN_LAUNCH("logsumexp", backend::cpu::logsumexp(xf, rd.empty() ? 0 : rd[0], out));
  } else {
    // Several dims: move them last and flatten them into one.
    Shape perm;
    for (int64_t d = 0, k = 0; d < xf.dim(); ++d) {
      if (k < int64_t(rd.size()) && rd[size_t(k)] == d) ++k;
      else perm.push_back(d);
    }
    for (int64_t d : rd) perm.push_back(d);
    Tensor flat = reshape(permute(xf.detach(), perm), {-1, reduced_numel(xf, rd)});
    KILN_LAUNCH("logsumexp", backend::cpu::logsumexp(flat, 1, out));
  }
  if (needs_grad(xf))
    record("logsumexp", {xf}, {out}, {xf, out}, [rd](const VjpArgs& a) -> Grads {
      const Tensor& x = a.saved[0];
      Shape kshape = reduced_shape(x.shape(), rd, true);
      return {reshape(a.grad(), kshape) * exp(x - reshape(a.saved[1], kshape))};
    });
  return out;
}

// ---- all / any ----

namespace {

template <bool And>
Tensor truth(const char* op, const Tensor& x, const Shape& rd, bool keepdim) {
  Tensor out = Tensor::empty(reduced_shape(x.shape(), rd, keepdim), kBool, x.device());
  if (And) KILN_LAUNCH("all", backend::cpu::all(x, out, rd));
  else KILN_LAUNCH("any", backend::cpu::any(x, out, rd));
  return x.dtype() == kU8 ? to(out, kU8) : out;  // PyTorch keeps u8 for u8 input
}

}  // namespace

Tensor all(const Tensor& x) {
  check_defined("all", x);
  return truth<true>("all", x, reduce_dims("all", x, {}), false);
}
Tensor any(const Tensor& x) {
  check_defined("any", x);
  return truth<false>("any", x, reduce_dims("any", x, {}), false);
}
Tensor all(const Tensor& x, int64_t dim, bool keepdim) {
  check_defined("all", x);
  return truth<true>("all", x, reduce_dims("all", x, {dim}), keepdim);
}
Tensor any(const Tensor& x, int64_t dim, bool keepdim) {
  check_defined("any", x);
  return truth<false>("any", x, reduce_dims("any", x, {dim}), keepdim);
}

// ---- cumsum ----

Tensor cumsum(const Tensor& x, int64_t dim) {
  check_defined("cumsum", x);
  int64_t d = wrap_dim("cumsum", dim, x.dim());
  Tensor out = Tensor::empty(x.shape(), sum_dtype(x.dtype()), x.device());
  KILN_LAUNCH("cumsum", backend::cpu::cumsum(x, d, out));
  if (needs_grad(x))
    record("cumsum", {x}, {out}, {}, [d](const VjpArgs& a) -> Grads {
      // Reverse running sum: sum over j >= i of g_j.
      const Tensor& g = a.grad();
      if (g.dim() == 0) return {g};
      return {flip(cumsum(flip(g, {d}), d), {d})};
    });
  return out;
}

}  // namespace kiln
