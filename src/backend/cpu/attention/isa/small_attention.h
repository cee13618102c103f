// The small-sequence attention kernels' two copies (NOTE [Per-ISA kernels] in
// CMakeLists.txt); contracts as in ../small_attention.h, whose entry points
// pick one with KILN_ISA_CALL.
#pragma once

#include "src/backend/cpu/attention/small_attention.h"
#include "src/backend/cpu/isa.h"

namespace kiln::backend::cpu {

KILN_ISA_DECLARE(
    void small_attention_forward(const SmallAttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& out, const Tensor& probs);
    void small_attention_backward(const SmallAttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& probs, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                                  const Tensor& dv);)

}  // namespace kiln::backend::cpu
