// Run-time choice of the quantized products' kernel copy (quant.h).
#include "src/backend/cpu/quant/quant.h"

#include "src/backend/cpu/quant/isa/quant.h"

namespace kiln::backend::cpu {

void q8_0_matmul(const int8_t* codes, const float* scales, int64_t rows, int64_t cols, const float* x,
                 int64_t batch, float* y) {
  KILN_ISA_CALL(q8_0_matmul, codes, scales, rows, cols, x, batch, y);
}

void q4_0_matmul(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, const float* x,
                 int64_t batch, float* y) {
  KILN_ISA_CALL(q4_0_matmul, codes, scales, rows, cols, x, batch, y);
}

}  // namespace kiln::backend::cpu
