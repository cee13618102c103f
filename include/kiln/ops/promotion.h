// PyTorch's result-type rules for mixed operands: tensors with dims beat 0-dim
// tensors, which beat plain numbers, unless the lower group has a higher kind
// (bool < integer < floating). f32 tensor + 2.5 is f32; i64 tensor + 2.5 is
// f32 (the default float); u8 tensor + i64 0-dim tensor is u8.
#pragma once

#include "kiln/core/tensor.h"

namespace kiln {

DType result_type(const Tensor& a, const Tensor& b);
DType result_type(const Tensor& a, Scalar b);
/// With two numbers (clamp's bounds).
DType result_type(const Tensor& a, Scalar b, Scalar c);
/// Whether a result of dtype `from` may be written into a tensor of dtype
/// `to` (in-place ops): no floating into integer or bool, no integer into bool.
bool can_cast(DType from, DType to);

}  // namespace kiln
