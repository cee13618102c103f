// CPU kernels shared by many ops: strided copy with dtype conversion, fill.
#pragma once

#include "kiln/core/tensor.h"

namespace kiln::backend::cpu {

/// dst[i] = convert(src[i]); src broadcasts to dst's shape; any strides.
void copy(const Tensor& src, const Tensor& dst);
/// dst[i] = value for every element of dst.
void fill(const Tensor& dst, Scalar value);

/// v as a D, as copy converts each element: bool is v != 0, bf16 goes through
/// f32 (shared by copy and ref::copy).
template <class D, class S>
D convert_value(S v) {
  if constexpr (std::is_same_v<D, bool>) return acc_t<S>(v) != acc_t<S>(0);
  else return D(acc_t<D>(acc_t<S>(v)));
}

namespace ref {
/// The plain element-by-element copy the fast one is tested against.
void copy(const Tensor& src, const Tensor& dst);
}  // namespace ref

}  // namespace kiln::backend::cpu
