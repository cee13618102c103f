// CPU kernels shared by many ops: strided copy with dtype conversion, fill.
#pragma once

#include "kiln/core/tensor.h"

namespace kiln::backend::cpu {

/// dst[i] = convert(src[i]); src broadcasts to dst's shape; any strides.
void copy(const Tensor& src, const Tensor& dst);
/// dst[i] = value for every element of dst.
void fill(const Tensor& dst, Scalar value);

namespace ref {
/// The plain element-by-element copy the fast one is tested against.
void copy(const Tensor& src, const Tensor& dst);
}  // namespace ref

}  // namespace kiln::backend::cpu
