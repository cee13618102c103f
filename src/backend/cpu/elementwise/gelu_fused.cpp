// The fused GELU kernels' entry points (gelu_fused.h): the copy for the CPU's
// vector ISA (isa/gelu_fused.cpp); the reference is gelu_fused_ref.cpp.
#include "src/backend/cpu/elementwise/gelu_fused.h"

#include "src/backend/cpu/elementwise/isa/gelu_fused.h"
#include "src/backend/cpu/isa.h"

namespace kiln::backend::cpu {

void gelu_tanh_with_grad(const Tensor& u, const Tensor& y, const Tensor& d) {
  KILN_ISA_CALL(gelu_tanh_with_grad, u, y, d);
}

void gelu_grad_bias(const Tensor& g, const Tensor& d, const Tensor& gu, const Tensor& gb) {
  KILN_ISA_CALL(gelu_grad_bias, g, d, gu, gb);
}

}  // namespace kiln::backend::cpu
