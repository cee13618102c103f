// The fused optimizer updates' two copies (NOTE [Per-ISA kernels] in
// CMakeLists.txt); contracts as in ../fused_updates.h, whose functions pick one
// with KILN_ISA_CALL.
#pragma once

#include "src/backend/cpu/isa.h"
#include "src/backend/cpu/optim/fused_updates.h"

namespace kiln::backend::cpu {

KILN_ISA_DECLARE(
    template <class T> void sgd_update(T* p, const T* g, T* buf, int64_t n, const SgdArgs& a);
    template <class T> void adam_update(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, const AdamArgs& a);
    template <class T> void muon_momentum(const T* g, T* buf, T* out, int64_t n, double beta, bool nesterov);
    template <class T> void scaled_update(T* p, const T* u, int64_t n, double decay_factor, double scale);)

}  // namespace kiln::backend::cpu
