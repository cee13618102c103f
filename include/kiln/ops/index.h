// Indexing, joining and rearranging: gather/scatter, cat/stack/split, flips,
// padding, masks of triangles, one-hot, sorting. Index tensors are i64 (i32
// accepted); out-of-range indices are errors naming the op and the bound.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

/// Rows of x along dim picked by a 1-D index.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
/// out[i][j] = x[index[i][j]][j] for dim 0 (torch.gather); index has x's ndim.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
/// Copy of x with src written at index along dim (torch.scatter); with
/// duplicate indices the last write wins.
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, Scalar value);
/// Copy of x with src added at index along dim.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
/// Copy of x with the slices of src added at index along dim, summing
/// duplicates (torch.index_add); index is 1-D with src.size(dim) entries.
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
/// weight[indices]: integer [...] -> [..., D] for weight [V, D]. Positions
/// whose index equals padding_idx (in [-V, V); negative counts from the end)
/// send no gradient to the weight, as F.embedding(padding_idx=...).
Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx = std::nullopt);

/// Joins along an existing dim; shapes must match elsewhere; dtypes promote.
Tensor cat(const std::vector<Tensor>& xs, int64_t dim = 0);
/// Joins along a new dim.
Tensor stack(const std::vector<Tensor>& xs, int64_t dim = 0);
/// Pieces of `size` along dim (the last may be smaller); views.
std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim = 0);
/// Pieces of the given sizes (must add up to the dim).
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
/// `chunks` pieces of ceil(n / chunks) (fewer if n is small); views.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
/// Undoes stack: the slices along dim.
std::vector<Tensor> unbind(const Tensor& x, int64_t dim = 0);

/// Reverses the order along each of dims.
Tensor flip(const Tensor& x, const Shape& dims);
/// Shifts elements along dim (elements leaving one end re-enter at the other);
/// with no dims, on the flattened tensor.
Tensor roll(const Tensor& x, int64_t shift, int64_t dim);
Tensor roll(const Tensor& x, int64_t shift);
/// Constant padding: pad = {last_lo, last_hi, prev_lo, prev_hi, ...} like
/// torch.nn.functional.pad; negative entries crop.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pad, Scalar value = 0);
/// Tiles x: repeats[i] copies along dim i (repeats may add leading dims).
Tensor repeat(const Tensor& x, const Shape& repeats);
/// Lower / upper triangle of the last two dims (diagonal offset k).
Tensor tril(const Tensor& x, int64_t k = 0);
Tensor triu(const Tensor& x, int64_t k = 0);
/// Integer [...] -> i64 [..., num_classes]; num_classes -1 means max + 1.
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);

/// (values, indices) of the k largest (or smallest) along dim, sorted.
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                               bool sorted = true);
/// Stable sort along dim: (values, indices).
std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);

}  // namespace kiln
