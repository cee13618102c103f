// bf16 on CPUs without bf16 instructions (Bf16Compute::f32, kiln/core/cpu_info.h):
// the oneDNN kernels (matmul, convolution) widen bf16 operands to f32, run
// their f32 path and round the result to bf16 once, instead of oneDNN's
// bf16 reference code (10-30x slower than f32 there).
#pragma once

#include "kiln/core/cpu_info.h"
#include "kiln/core/tensor.h"
#include "src/backend/cpu/copy/copy.h"

namespace kiln::backend::cpu {

/// True when a kernel of dtype dt should compute through f32 copies.
inline bool widen_bf16(DType dt) { return dt == kBF16 && cpu_info().bf16 == Bf16Compute::f32; }

/// A contiguous f32 copy of t (t undefined: undefined).
inline Tensor widened(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor w = Tensor::empty(t.shape(), kF32, t.device());
  copy(t, w);
  return w;
}

}  // namespace kiln::backend::cpu
