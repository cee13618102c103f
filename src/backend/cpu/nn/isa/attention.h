// The flash-attention kernels' two copies (NOTE [Per-ISA kernels] in
// CMakeLists.txt); contracts as cpu::flash_attention_forward/backward in
// ../attention.h, which pick one with KILN_ISA_CALL.
#pragma once

#include "src/backend/cpu/isa.h"
#include "src/backend/cpu/nn/attention.h"

namespace kiln::backend::cpu {

KILN_ISA_DECLARE(
    void flash_attention_forward(const AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& out, const Tensor& lse);
    void flash_attention_backward(const AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& dout, const Tensor& lse, const Tensor& dq,
                                  const Tensor& dk, const Tensor& dv);)

}  // namespace kiln::backend::cpu
