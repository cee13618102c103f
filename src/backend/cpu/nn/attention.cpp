// CPU flash attention: the entry points, which run the kernel copy for the
// CPU's vector ISA (isa/attention.cpp); the reference is attention_ref.cpp.
#include "src/backend/cpu/nn/attention.h"

#include "src/backend/cpu/isa.h"
#include "src/backend/cpu/nn/isa/attention.h"

namespace kiln::backend::cpu {

void flash_attention_forward(const AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& lse) {
  KILN_ISA_CALL(flash_attention_forward, s, q, k, v, out, lse);
}

void flash_attention_backward(const AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& dout, const Tensor& lse, const Tensor& dq,
                              const Tensor& dk, const Tensor& dv) {
  KILN_ISA_CALL(flash_attention_backward, s, q, k, v, out, dout, lse, dq, dk, dv);
}

}  // namespace kiln::backend::cpu
