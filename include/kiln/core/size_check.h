// Checked size arithmetic (issue 23): element counts, strides and byte counts
// that would overflow int64, negative sizes and failed allocations become a
// kiln::Error naming the op and the shape, never a wrapped size or a 0-byte block.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "kiln/core/tensor.h"

namespace kiln {

/// numel(shape) after checking that every size is >= 0 and that the product
/// of the non-zero sizes (what the strides reach) fits in int64; otherwise
/// throws "[op] negative size -2 in shape [3, -2]" or "[op] shape [..] has more
/// than 2^63 elements".
int64_t checked_numel(const char* op, std::span<const int64_t> shape);

/// Bytes of a contiguous tensor: checked_numel(op, shape) * itemsize(dtype),
/// refusing more than 2^63 - 1 ("[op] shape [..] of f32 has more than 2^63 bytes").
int64_t checked_nbytes(const char* op, std::span<const int64_t> shape, DType dtype);

/// Tensor::empty with the errors named after op: a bad shape as above, and a
/// block the system refuses as "[op] cannot allocate N bytes (256 TiB) for
/// shape [..] of f32: out of memory".
Tensor empty_for(const char* op, const Shape& shape, DType dtype, Device device = kCPU);

/// "256 TiB", "1.5 GiB", "12 bytes": a size for messages.
std::string format_bytes(int64_t nbytes);

namespace detail {
/// The op of the allocator's errors: detail::cpu_allocate throws kiln::Error
/// "[allocate] out of memory: ..." when the system refuses a block or one of
/// more than 2^62 bytes is asked for; it never hands out a smaller block.
inline constexpr const char* kAllocateOp = "allocate";
}  // namespace detail

}  // namespace kiln
