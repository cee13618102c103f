// The grouped products' two kernel copies (NOTE [Per-ISA kernels] in
// CMakeLists.txt), f32 only; contracts in ../moe.h (GroupedGemm), whose
// grouped_matmul / grouped_matmul_weight_grad pick one with KILN_ISA_CALL.
#pragma once

#include "src/backend/cpu/isa.h"
#include "src/backend/cpu/moe/moe.h"

namespace kiln::backend::cpu {

KILN_ISA_DECLARE(void grouped_gemm_f32(const GroupedGemm& g);
                 void grouped_gemm_weight_grad_f32(const GroupedGemmWeightGrad& g);)

}  // namespace kiln::backend::cpu
