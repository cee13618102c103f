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
    /// vnni: use vpdpbusd (only where q4_0_vnni_compiled() and the CPU has AVX512-VNNI).
    void q4_0_matmul(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, const float* x,
                     int64_t batch, float* y, bool vnni);
    /// Whether this copy was built with a VNNI path (the build's baseline has AVX512-VNNI).
    bool q4_0_vnni_compiled();)

}  // namespace kiln::backend::cpu
