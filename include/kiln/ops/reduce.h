// Reductions, softmax and scans. `dims` empty means all dims; keepdim keeps
// reduced dims with size 1. Integer/bool sums give i64, as in PyTorch.
#pragma once

#include <initializer_list>
#include <optional>
#include <utility>

#include "kiln/core/tensor.h"

namespace kiln {

Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim, DType dtype);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor prod(const Tensor& x);
Tensor prod(const Tensor& x, int64_t dim, bool keepdim = false);

/// Largest / smallest element (NaN if any); an empty input is an error. The
/// gradient is shared evenly among ties, as PyTorch's max() does.
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
/// (values, indices) along dim; indices are i64 and point at the first
/// occurrence of the extreme.
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
/// Flat index (no dim) or indices along dim; i64.
Tensor argmax(const Tensor& x);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
/// amax/amin over several dims; the gradient is shared evenly among ties.
Tensor amax(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor amin(const Tensor& x, const Shape& dims, bool keepdim = false);

/// Variance / standard deviation; unbiased divides by N - 1 (torch default).
Tensor var(const Tensor& x, bool unbiased = true);
Tensor var(const Tensor& x, const Shape& dims, bool unbiased = true, bool keepdim = false);
Tensor std(const Tensor& x, bool unbiased = true);
Tensor std(const Tensor& x, const Shape& dims, bool unbiased = true, bool keepdim = false);
/// var(x, {1}) and std(x, {1}) select these, not the bool overloads above.
Tensor var(const Tensor& x, std::initializer_list<int64_t> dims, bool unbiased = true, bool keepdim = false);
Tensor std(const Tensor& x, std::initializer_list<int64_t> dims, bool unbiased = true, bool keepdim = false);
/// p-norm (p = 2 by default; inf for max-abs); over all dims or `dims`.
Tensor norm(const Tensor& x, double p = 2.0);
Tensor norm(const Tensor& x, double p, const Shape& dims, bool keepdim = false);
/// log(sum(exp(x))) computed stably.
Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim = false);

/// All / any element nonzero: bool results (u8 for u8 input, as in PyTorch).
Tensor all(const Tensor& x);
Tensor all(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor any(const Tensor& x);
Tensor any(const Tensor& x, int64_t dim, bool keepdim = false);

/// exp(x) / sum(exp(x)) along dim, stable; log_softmax is its log.
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

/// Running sum along dim.
Tensor cumsum(const Tensor& x, int64_t dim);

}  // namespace kiln
