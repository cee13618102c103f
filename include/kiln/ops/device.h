// Moving tensors between devices.
#pragma once

#include "kiln/core/backends.h"
#include "kiln/core/tensor.h"

namespace kiln {

/// x on `device` (x itself when already there; differentiable). Without a GPU
/// backend any device but the CPU is an Error: "[to] this build has no GPU
/// backend: ...".
///   Tensor y = to(x, kCPU);
Tensor to(const Tensor& x, Device device);

}  // namespace kiln
