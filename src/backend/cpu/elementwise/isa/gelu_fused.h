// The fused GELU kernels' two copies (NOTE [Per-ISA kernels] in
// CMakeLists.txt); contracts as in ../gelu_fused.h, whose entry points pick
// one with KILN_ISA_CALL.
#pragma once

#include "src/backend/cpu/elementwise/gelu_fused.h"
#include "src/backend/cpu/isa.h"

namespace kiln::backend::cpu {

KILN_ISA_DECLARE(void gelu_tanh_with_grad(const Tensor& u, const Tensor& y, const Tensor& d);
                 void gelu_grad_bias(const Tensor& g, const Tensor& d, const Tensor& gu, const Tensor& gb);)

}  // namespace kiln::backend::cpu
