// Quantized matrix products: the kernels' two copies (NOTE [Per-ISA kernels]
// in CMakeLists.txt); contracts as in ../quant.h, whose functions pick one
// with KILN_ISA_CALL.
#pragma once

#include <cstdint>

#include "src/backend/cpu/isa.h"

namespace kiln::backend::cpu {

KILN_ISA_DECLARE(
    void q8_0_matmul(const int8_t* codes, const float* scales, int64_t rows, int64_t cols, const float* x,
                     int64_t batch, float* y);
    void q4_0_matmul(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, const float* x,
                     int64_t batch, float* y);)

}  // namespace kiln::backend::cpu
