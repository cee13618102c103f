// The GPU backend's entry points for ops. A build without a GPU backend links
// src/backend/no_gpu/gpu.cpp, where every one throws (NOTE [Backend dispatch]).
#pragma once

#include "kiln/core/device.h"
#include "kiln/core/tensor.h"

namespace kiln::backend::gpu {

/// Whether this build has a GPU backend (false: the no_gpu stubs).
bool is_built();

/// dst = src across devices (host <-> GPU), for to(x, Device): same shape and
/// dtype, dst contiguous.
void copy(const char* op, const Tensor& src, const Tensor& dst);

/// Throws "[op] ..." for an op the GPU backend does not implement; with no GPU
/// backend, "[op] this build has no GPU backend".
[[noreturn]] void unsupported(const char* op, Device device);

}  // namespace kiln::backend::gpu
