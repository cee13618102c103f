// The fused optimizer updates: the entry points, which run the copy for the
// CPU's vector ISA (isa/fused_updates.cpp).
#include "src/backend/cpu/optim/fused_updates.h"

#include "src/backend/cpu/optim/isa/fused_updates.h"

namespace kiln::backend::cpu {

template <class T>
void sgd_update(T* p, const T* g, T* buf, int64_t n, const SgdArgs& a) {
  KILN_ISA_CALL(sgd_update<T>, p, g, buf, n, a);
}

template <class T>
void adam_update(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, const AdamArgs& a) {
  KILN_ISA_CALL(adam_update<T>, p, g, m, v, vmax, n, a);
}

template <class T>
void muon_momentum(const T* g, T* buf, T* out, int64_t n, double beta, bool nesterov) {
  KILN_ISA_CALL(muon_momentum<T>, g, buf, out, n, beta, nesterov);
}

template <class T>
void scaled_update(T* p, const T* u, int64_t n, double decay_factor, double scale) {
  KILN_ISA_CALL(scaled_update<T>, p, u, n, decay_factor, scale);
}

KILN_FUSED_UPDATES_INSTANTIATE(float)
KILN_FUSED_UPDATES_INSTANTIATE(double)

}  // namespace kiln::backend::cpu
