// Checks shared by the data sets' gather(): the batch tensors they write into.
#pragma once

#include <cstdint>
#include <span>

#include "kiln/core/tensor.h"

namespace kiln::data {

/// out (the batch's `what`: "input" or "target") must be a contiguous
/// [n, row...] tensor of `dtype`; else "[op] the batch's input is [2, 6] f32,
/// expected [2, 2, 3] f32".
void check_batch_part(const char* op, const char* what, const Tensor& out, int64_t n, std::span<const int64_t> row,
                      DType dtype);

}  // namespace kiln::data
