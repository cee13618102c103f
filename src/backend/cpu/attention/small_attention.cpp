// Small-sequence attention: the entry points, which run the kernel copy for
// the CPU's vector ISA (isa/small_attention.cpp); the reference is
// small_attention_ref.cpp.
#include "src/backend/cpu/attention/small_attention.h"

#include "src/backend/cpu/attention/isa/small_attention.h"
#include "src/backend/cpu/isa.h"

namespace kiln::backend::cpu {

void small_attention_forward(const SmallAttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& probs) {
  KILN_ISA_CALL(small_attention_forward, s, q, k, v, out, probs);
}

void small_attention_backward(const SmallAttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& probs, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                              const Tensor& dv) {
  KILN_ISA_CALL(small_attention_backward, s, q, k, v, probs, dout, dq, dk, dv);
}

}  // namespace kiln::backend::cpu
