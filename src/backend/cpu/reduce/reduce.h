// CPU reduction kernels: sum/prod/max/min/norm/all/any over any set of dims of
// a strided input, arg-reductions along one dim, softmax rows and cumsum, and
// the plain ref:: versions the fast kernels are tested against.
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln::backend::cpu {

// All reductions below take `dims`: the reduced dims of x, wrapped, sorted and
// unique (empty: none reduced, every element is its own output). `out` is
// contiguous and holds numel(x) / prod(x.shape[dims]) elements in the order of
// x's kept dims (its shape may or may not keep the reduced dims as 1s).
//
// Results are bit-identical for every thread count: each output's reduction
// tree depends only on the shapes (NOTE [Deterministic reduction tree] in
// reduce_engine.h).

/// out = scale * sum(x). x: any dtype; out: f32/f64/bf16 for floating x (the
/// sum runs in acc_t, pairwise), i64 for integer/bool x.
void sum(const Tensor& x, const Tensor& out, const Shape& dims, double scale = 1.0);
/// out = prod(x); out as for sum.
void prod(const Tensor& x, const Tensor& out, const Shape& dims);
/// Largest / smallest value (NaN wins); out has x's dtype; reduced size > 0.
void amax(const Tensor& x, const Tensor& out, const Shape& dims);
void amin(const Tensor& x, const Tensor& out, const Shape& dims);
/// Nonzero tests; out is bool.
void all(const Tensor& x, const Tensor& out, const Shape& dims);
void any(const Tensor& x, const Tensor& out, const Shape& dims);
/// p-norm of floating x (p = 0 counts nonzeros, +-inf max/min |x|); out has x's dtype.
void norm(const Tensor& x, const Tensor& out, const Shape& dims, double p);

/// Along one dim of size > 0: values (x's dtype) and i64 indices of the first
/// largest (smallest) element; NaN counts as largest and smallest. Either
/// output may be undefined. Both are contiguous with x's shape minus `dim`.
void max_dim(const Tensor& x, int64_t dim, const Tensor& values, const Tensor& indices);
void min_dim(const Tensor& x, int64_t dim, const Tensor& values, const Tensor& indices);

/// out = softmax(x) or log_softmax(x) along dim; x floating, out contiguous
/// with x's shape and dtype.
void softmax(const Tensor& x, int64_t dim, const Tensor& out, bool log);
/// out = log(sum(exp(x))) along dim, stable (max subtracted; a row of all
/// -inf gives -inf); out contiguous with x's shape minus dim, x's dtype.
void logsumexp(const Tensor& x, int64_t dim, const Tensor& out);

/// out = running sum of x along dim; out contiguous with x's shape, dtype
/// x's (floating) or i64; floating sums run in f64 like PyTorch's.
void cumsum(const Tensor& x, int64_t dim, const Tensor& out);

namespace ref {
// Plain element-by-element versions: one sequential pass over x in row-major
// order, accumulating into out[o] (sums and norms in f64).
void sum(const Tensor& x, const Tensor& out, const Shape& dims, double scale = 1.0);
void prod(const Tensor& x, const Tensor& out, const Shape& dims);
void amax(const Tensor& x, const Tensor& out, const Shape& dims);
void amin(const Tensor& x, const Tensor& out, const Shape& dims);
void all(const Tensor& x, const Tensor& out, const Shape& dims);
void any(const Tensor& x, const Tensor& out, const Shape& dims);
void norm(const Tensor& x, const Tensor& out, const Shape& dims, double p);
void max_dim(const Tensor& x, int64_t dim, const Tensor& values, const Tensor& indices);
void min_dim(const Tensor& x, int64_t dim, const Tensor& values, const Tensor& indices);
void softmax(const Tensor& x, int64_t dim, const Tensor& out, bool log);
void logsumexp(const Tensor& x, int64_t dim, const Tensor& out);
void cumsum(const Tensor& x, int64_t dim, const Tensor& out);
}  // namespace ref

/// x (made contiguous) seen as [outer, n, inner] around `dim`.
struct Rows {
  Tensor c;  // contiguous x
  int64_t outer = 1, n = 1, inner = 1;
};
Rows rows_around(const Tensor& x, int64_t dim);

}  // namespace kiln::backend::cpu
