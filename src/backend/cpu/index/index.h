// CPU kernels for indexing and joining: gather/scatter, index_select/index_add,
// cat, triangles, one-hot and sorting. Inputs arrive validated (shapes, dtypes
// and index ranges checked by the ops in src/ops/index*.cpp).
#pragma once

#include <optional>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::backend::cpu {

/// The first value of `index` (i32 or i64, any layout, row-major order) that
/// lies outside [0, bound), or nullopt when all are in range.
std::optional<int64_t> find_bad_index(const Tensor& index, int64_t bound);

/// The largest value of a non-empty `index` (i32 or i64).
int64_t max_index(const Tensor& index);

/// out[p] = x[p with p[dim] := index[p]]. out and index have the same shape;
/// x.size(d) >= index.size(d) for d != dim.
void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);

enum class ScatterMode { assign, add };
/// out[p with p[dim] := index[p]] = src[p] (assign: the last write along dim
/// wins) or += src[p] (add). out already holds the base values; src.size(d) >=
/// index.size(d) for all d; out has src's dtype.
void scatter(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, ScatterMode mode);
/// The same with one value for every written position.
void scatter_fill(const Tensor& out, int64_t dim, const Tensor& index, Scalar value);

/// out = x.index_select(dim, index): index is 1-D, out is contiguous with x's
/// shape except out.size(dim) == index.numel().
void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);
/// out.index_select(dim, index) += src, summing duplicates: out contiguous, src
/// shaped like out except src.size(dim) == index.numel().
void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);

/// Writes xs one after another along dim into the contiguous out (whose dtype
/// the inputs convert to); xs share out's shape except along dim.
void cat(const std::vector<Tensor>& xs, int64_t dim, const Tensor& out);

/// out = x with the elements above (lower) or below (!lower) diagonal k of
/// the last two dims zeroed; out contiguous.
void triangle(const Tensor& x, int64_t k, bool lower, const Tensor& out);

/// out[..., c] = (indices[...] == c): out is contiguous i64 [..., C]; indices
/// are in range.
void one_hot(const Tensor& indices, const Tensor& out);

/// Sorts every row of x along dim (stable: ties keep their order; NaN counts
/// as the largest value) and writes the first values.size(dim) of each row
/// into the contiguous values (x's dtype) and indices (i64).
void sort(const Tensor& x, int64_t dim, bool descending, const Tensor& values, const Tensor& indices);

/// a + b for scatter/index_add accumulation (bool: a || b; bf16 through f32).
template <class T>
T add_values(T a, T b) {
  if constexpr (std::is_same_v<T, bool>) return a || b;
  else return T(acc_t<T>(a) + acc_t<T>(b));
}

namespace ref {
/// Plain multi-index loops, the oracles for the kernels above.
void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);
void scatter(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, ScatterMode mode);
void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);
}  // namespace ref

}  // namespace kiln::backend::cpu
