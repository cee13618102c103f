// Views and layout: ops that change how elements are addressed, plus copies.
// Views share storage with their input (x.view(...), transpose, ...); their
// vjps map the gradient back through the inverse layout change.
#pragma once

#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

/// Same elements, new shape; one dim may be -1. Needs compatible strides
/// (use reshape otherwise).
Tensor view(const Tensor& x, const Shape& shape);
/// view when possible, else a contiguous copy.
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
/// Reorders dims: out.shape[i] == x.shape[dims[i]].
Tensor permute(const Tensor& x, const Shape& dims);
/// Elements start .. start+length-1 along dim.
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
/// Python's x[start:end:step] along dim; negative and out-of-range bounds clamp
/// like Python. step >= 1.
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
/// Removes dim, taking element `index` (negative counts from the end).
Tensor select(const Tensor& x, int64_t dim, int64_t index);
/// Broadcasts size-1 dims (and new leading dims) to `shape`; -1 keeps a dim.
Tensor expand(const Tensor& x, const Shape& shape);
Tensor broadcast_to(const Tensor& x, const Shape& shape);
/// Removes all size-1 dims / the given one if it has size 1.
Tensor squeeze(const Tensor& x);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);
/// Merges dims start_dim..end_dim into one.
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
/// Splits dim into `sizes` (one may be -1).
Tensor unflatten(const Tensor& x, int64_t dim, const Shape& sizes);

/// x itself when contiguous, else a contiguous copy.
Tensor contiguous(const Tensor& x);
/// A contiguous copy (differentiable).
Tensor clone(const Tensor& x);
/// Converted copy (x itself when the dtype already matches). Differentiable
/// between floating dtypes.
Tensor to(const Tensor& x, DType dtype);
/// Copies src (broadcast to dst's shape, converted to dst's dtype) into dst.
Tensor copy_(const Tensor& dst, const Tensor& src);

/// Sums `x` down to `shape` (the inverse of broadcasting): the vjp of every
/// broadcasting op.
Tensor sum_to(const Tensor& x, const Shape& shape);

}  // namespace kiln
