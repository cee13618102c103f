// The Mamba-3 scan's two kernel copies (NOTE [Per-ISA kernels] in
// CMakeLists.txt); contracts as in ../ssm.h, whose functions pick one with KILN_ISA_CALL.
#pragma once

#include "src/backend/cpu/isa.h"
#include "src/backend/cpu/ssm/ssm.h"

namespace kiln::backend::cpu {

KILN_ISA_DECLARE(void mamba3_scan_forward(const Mamba3Scan& s);
                 void mamba3_scan_backward(const Mamba3Scan& s, const Mamba3ScanGrads& g);
                 void mamba3_scan_forward_chunked(const Mamba3Scan& s);
                 void mamba3_scan_backward_chunked(const Mamba3Scan& s, const Mamba3ScanGrads& g);)

}  // namespace kiln::backend::cpu
