// Indexing ops: gather/scatter, index_select/index_add, embedding, one_hot.
// Every index is range-checked before anything is written.
#include "kiln/ops/index.h"

#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/record.h"
#include "kiln/ops/shape.h"
#include "src/backend/cpu/copy/copy.h"
#include "src/backend/cpu/index/index.h"
#include "src/ops/checks.h"

namespace kiln {

namespace {

void check_index_dtype(const char* op, const Tensor& index, const char* what = "index") {
  check_defined(op, index, what);
  KILN_CHECK(index.dtype() == kI64 || index.dtype() == kI32, op, "{} {} has dtype {}, expected i64 or i32", what,
             to_string(index.shape()), name(index.dtype()));
}

// Throws unless every index lies in [0, size) for dim `dim` of `x`.
void check_range(const char* op, const Tensor& index, int64_t dim, const Tensor& x) {
  int64_t size = x.dim() ? x.shape()[size_t(dim)] : 1;
  // A launch: the check reads the indices' values, so a replay checks each new batch.
  const Shape xs = x.shape();
  KILN_LAUNCH(op, if (auto bad = backend::cpu::find_bad_index(index, size))
    KILN_FAIL(op, "index {} is out of range for dim {} of size {} (input {})", *bad, dim, size, to_string(xs)));
}

// A 0-dim tensor seen as [1] (gather and scatter treat scalars as 1-D).
Tensor as_1d(const Tensor& t) {
  if (t.dim() > 0) return t;
  return Tensor::make_view(t.storage(), {1}, {1}, t.storage_offset(), t.dtype());
}

// The checks shared by gather and the scatters (torch's rules): index has
// x's ndim; index.size(d) <= x.size(d) for d != dim; index.size(d) <=
// src.size(d) for every d.
int64_t check_gather_scatter(const char* op, const Tensor& x, int64_t dim, const Tensor& index, const Tensor* src) {
  check_defined(op, x, "input");
  check_index_dtype(op, index);
  int64_t d = wrap_dim(op, dim, x.dim());
  KILN_CHECK(index.dim() == x.dim(), op, "index {} has {} dims, expected {} like input {}", to_string(index.shape()),
             index.dim(), x.dim(), to_string(x.shape()));
  for (int64_t i = 0; i < x.dim(); ++i)
    KILN_CHECK(i == d || index.shape()[size_t(i)] <= x.shape()[size_t(i)], op,
               "index {} is larger than input {} in dim {} ({} > {})", to_string(index.shape()), to_string(x.shape()),
               i, index.shape()[size_t(i)], x.shape()[size_t(i)]);
  if (src) {
    check_defined(op, *src, "src");
    KILN_CHECK(src->dim() == x.dim(), op, "src {} has {} dims, expected {} like input {}", to_string(src->shape()),
               src->dim(), x.dim(), to_string(x.shape()));
    for (int64_t i = 0; i < x.dim(); ++i)
      KILN_CHECK(index.shape()[size_t(i)] <= src->shape()[size_t(i)], op,
                 "index {} is larger than src {} in dim {} ({} > {})", to_string(index.shape()),
                 to_string(src->shape()), i, index.shape()[size_t(i)], src->shape()[size_t(i)]);
    KILN_CHECK(src->dtype() == x.dtype(), op, "src has dtype {}, expected {} like input", name(src->dtype()),
               name(x.dtype()));
  }
  check_range(op, index, d, x);
  return d;
}

// The gradient of scatter's src: g gathered at index, zero-padded up to src's
// shape where src is larger than index (those elements were never read).
Tensor src_grad(const Tensor& g, int64_t d, const Tensor& index, const Shape& src_shape) {
  Tensor r = gather(g, d, index);
  if (r.shape() == src_shape) return r;
  std::vector<int64_t> p;
  for (int64_t i = r.dim() - 1; i >= 0; --i) {
    p.push_back(0);
    p.push_back(src_shape[size_t(i)] - r.shape()[size_t(i)]);
  }
  return pad(r, p);
}

// The copy of x that a scatter writes into.
Tensor copy_of(const Tensor& x) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  KILN_LAUNCH("copy", backend::cpu::copy(x, out));
  return out;
}

}  // namespace

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  int64_t d = check_gather_scatter("gather", x, dim, index, nullptr);
  Tensor out = Tensor::empty(index.shape(), x.dtype(), x.device());
  KILN_LAUNCH("gather", backend::cpu::gather(as_1d(x), d, as_1d(index), as_1d(out)));
  if (needs_grad(x))
    record("gather", {x}, {out}, {index}, [d, in = x.shape()](const VjpArgs& a) -> Grads {
      return {scatter_add(zeros(in, {.dtype = a.grad().dtype(), .device = a.grad().device()}), d, a.saved[0], a.grad())};
    });
  return out;
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  int64_t d = check_gather_scatter("scatter", x, dim, index, &src);
  Tensor out = copy_of(x);
  KILN_LAUNCH("scatter", backend::cpu::scatter(as_1d(out), d, as_1d(index), as_1d(src), backend::cpu::ScatterMode::assign));
  if (needs_grad(x, src))
    record("scatter", {x, src}, {out}, {index}, [d, ss = src.shape()](const VjpArgs& a) -> Grads {
      const Tensor& g = a.grad();
      return {a.needs(0) ? scatter(g, d, a.saved[0], 0) : Tensor(),
              a.needs(1) ? src_grad(g, d, a.saved[0], ss) : Tensor()};
    });
  return out;
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, Scalar value) {
  int64_t d = check_gather_scatter("scatter", x, dim, index, nullptr);
  Tensor out = copy_of(x);
  KILN_LAUNCH("scatter_fill", backend::cpu::scatter_fill(as_1d(out), d, as_1d(index), value));
  if (needs_grad(x))
    record("scatter", {x}, {out}, {index}, [d](const VjpArgs& a) -> Grads {
      return {scatter(a.grad(), d, a.saved[0], 0)};
    });
  return out;
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  int64_t d = check_gather_scatter("scatter_add", x, dim, index, &src);
  Tensor out = copy_of(x);
  KILN_LAUNCH("scatter", backend::cpu::scatter(as_1d(out), d, as_1d(index), as_1d(src), backend::cpu::ScatterMode::add));
  if (needs_grad(x, src))
    record("scatter_add", {x, src}, {out}, {index}, [d, ss = src.shape()](const VjpArgs& a) -> Grads {
      return {a.needs(0) ? a.grad() : Tensor(), a.needs(1) ? src_grad(a.grad(), d, a.saved[0], ss) : Tensor()};
    });
  return out;
}

namespace {
// index_select / index_add: a 1-D (or 0-dim, meaning one entry) index into a
// tensor with at least one dim.
int64_t check_select(const char* op, const Tensor& x, int64_t dim, const Tensor& index) {
  check_defined(op, x, "input");
  check_index_dtype(op, index);
  KILN_CHECK(x.dim() > 0, op, "cannot index a 0-dim tensor");
  int64_t d = wrap_dim(op, dim, x.dim());
  KILN_CHECK(index.dim() <= 1, op, "index must be 1-D, got shape {}", to_string(index.shape()));
  check_range(op, index, d, x);
  return d;
}
}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  int64_t d = check_select("index_select", x, dim, index);
  Shape s = x.shape();
  s[size_t(d)] = index.numel();
  Tensor out = Tensor::empty(s, x.dtype(), x.device());
  KILN_LAUNCH("index_select", backend::cpu::index_select(x, d, index, out));
  if (needs_grad(x))
    record("index_select", {x}, {out}, {index}, [d, in = x.shape()](const VjpArgs& a) -> Grads {
      return {index_add(zeros(in, {.dtype = a.grad().dtype(), .device = a.grad().device()}), d, a.saved[0], a.grad())};
    });
  return out;
}

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  int64_t d = check_select("index_add", x, dim, index);
  check_defined("index_add", src, "src");
  Shape want = x.shape();
  want[size_t(d)] = index.numel();
  KILN_CHECK(src.shape() == want, "index_add", "src {} does not match input {} with dim {} of size {} (index {})",
             to_string(src.shape()), to_string(x.shape()), d, index.numel(), to_string(index.shape()));
  KILN_CHECK(src.dtype() == x.dtype(), "index_add", "src has dtype {}, expected {} like input", name(src.dtype()),
             name(x.dtype()));
  Tensor out = copy_of(x);
  KILN_LAUNCH("index_add", backend::cpu::index_add(out, d, index, src));
  if (needs_grad(x, src))
    record("index_add", {x, src}, {out}, {index}, [d](const VjpArgs& a) -> Grads {
      return {a.needs(0) ? a.grad() : Tensor(), a.needs(1) ? index_select(a.grad(), d, a.saved[0]) : Tensor()};
    });
  return out;
}

Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx) {
  check_defined("embedding", weight, "weight");
  check_index_dtype("embedding", indices, "indices");
  KILN_CHECK(weight.dim() == 2, "embedding", "weight must be 2-D [num_embeddings, embedding_dim], got {}",
             to_string(weight.shape()));
  const int64_t V = weight.shape()[0], D = weight.shape()[1];
  if (padding_idx) {
    KILN_CHECK(*padding_idx >= -V && *padding_idx < V, "embedding",
               "padding_idx {} is out of range for {} embeddings (weight {})", *padding_idx, V,
               to_string(weight.shape()));
    if (*padding_idx < 0) *padding_idx += V;
  }
  // A launch: the check reads the indices' values, so a replay checks each new batch.
  KILN_LAUNCH("embedding", if (auto bad = backend::cpu::find_bad_index(indices, V))
    KILN_FAIL("embedding", "index {} is out of range for {} embeddings (weight {})", *bad, V,
              to_string(weight.shape())));
  // [...] indices -> [N] rows of weight -> [..., D].
  Tensor flat = indices.is_contiguous() ? Tensor::make_view(indices.storage(), {indices.numel()}, {1},
                                                            indices.storage_offset(), indices.dtype())
                                        : reshape(indices, {-1});
  Shape s = indices.shape();
  s.push_back(D);
  Tensor out = Tensor::empty(s, weight.dtype(), weight.device());
  // The [N, D] view made once, outside the launch: a recorded launch must hold
  // the tensors its kernel reaches (a view made inside it would hide its hold
  // on `out` from the compiled step's buffer analysis, docs/compile.md).
  const Tensor rows_out = Tensor::make_view(out.storage(), {flat.numel(), D}, {D, 1}, 0, out.dtype());
  KILN_LAUNCH("index_select", backend::cpu::index_select(weight, 0, flat, rows_out));
  if (needs_grad(weight))
    record("embedding", {weight}, {out}, {flat}, [V, D, padding_idx](const VjpArgs& a) -> Grads {
      const Tensor& idx = a.saved[0];
      Tensor rows = reshape(a.grad(), {idx.numel(), D});  // [N, D]
      // Rows looked up at padding_idx contribute nothing.
      if (padding_idx) rows = where(reshape(ne(idx, *padding_idx), {idx.numel(), 1}), rows, 0);
      return {index_add(zeros({V, D}, {.dtype = a.grad().dtype(), .device = a.grad().device()}), 0, idx, rows)};
    });
  return out;
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  check_index_dtype("one_hot", indices, "indices");
  KILN_CHECK(num_classes >= -1, "one_hot", "num_classes must be -1 (infer) or non-negative, got {}", num_classes);
  if (auto neg = backend::cpu::find_bad_index(indices, INT64_MAX))
    KILN_FAIL("one_hot", "class value {} is negative (indices {})", *neg, to_string(indices.shape()));
  if (num_classes == -1) {
    KILN_CHECK(indices.numel() > 0, "one_hot",
               "cannot infer num_classes from an empty tensor {}; pass num_classes", to_string(indices.shape()));
    num_classes = backend::cpu::max_index(indices) + 1;
  }
  if (auto bad = backend::cpu::find_bad_index(indices, num_classes))
    KILN_FAIL("one_hot", "class value {} is out of range for num_classes {}", *bad, num_classes);
  Shape s = indices.shape();
  s.push_back(num_classes);
  Tensor out = Tensor::empty(s, kI64, indices.device());
  KILN_LAUNCH("one_hot", backend::cpu::one_hot(indices, out));
  return out;
}

}  // namespace kiln
