// CPU softmax, log_softmax and logsumexp: the kernels' two copies (NOTE [Per-ISA kernels] in CMakeLists.txt);
// contracts as in ../reduce.h, whose functions pick one with KILN_ISA_CALL.
#pragma once

#include "src/backend/cpu/isa.h"
#include "src/backend/cpu/reduce/reduce.h"

namespace kiln::backend::cpu {

KILN_ISA_DECLARE(
    void softmax(const Tensor& x, int64_t dim, const Tensor& out, bool log);
    void logsumexp(const Tensor& x, int64_t dim, const Tensor& out);)

}  // namespace kiln::backend::cpu
