// CPU Mamba-3 scan: the entry points, which run the kernel copy for the CPU's
// vector ISA (isa/ssm.cpp).
#include "src/backend/cpu/ssm/ssm.h"

#include "src/backend/cpu/ssm/isa/ssm.h"

namespace kiln::backend::cpu {

void mamba3_scan_forward(const Mamba3Scan& s) { KILN_ISA_CALL(mamba3_scan_forward, s); }

void mamba3_scan_backward(const Mamba3Scan& s, const Mamba3ScanGrads& g) {
  KILN_ISA_CALL(mamba3_scan_backward, s, g);
}

void mamba3_scan_forward_chunked(const Mamba3Scan& s) { KILN_ISA_CALL(mamba3_scan_forward_chunked, s); }

void mamba3_scan_backward_chunked(const Mamba3Scan& s, const Mamba3ScanGrads& g) {
  KILN_ISA_CALL(mamba3_scan_backward_chunked, s, g);
}

}  // namespace kiln::backend::cpu
