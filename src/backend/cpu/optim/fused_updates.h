// Fused optimizer updates: one pass over a parameter and its state per step,
// no temporaries (spec: "updates are fused, vectorised loops"). Each reads and
// writes every element once, so they run at memory bandwidth; large
// parameters are split over the pool. The arithmetic follows PyTorch 1.13's
// single-tensor updates operation by operation (scalars rounded to T where
// PyTorch rounds them), so trajectories match it to rounding.
#pragma once

#include <cstdint>

namespace kiln::backend::cpu {

struct SgdArgs {
  double lr, momentum, dampening, weight_decay;  // weight_decay 0 when the parameter's decay flag is off
  bool nesterov, maximize;
  bool first;  // momentum buffer not yet initialised: buf = d_p (PyTorch's clone)
};
// p: [n]; g: [n]; buf: [n] or null without momentum.
template <class T>
void sgd_update(T* p, const T* g, T* buf, int64_t n, const SgdArgs& a);

struct AdamArgs {
  double beta1, beta2, eps;
  double l2;             // Adam's coupled weight decay: g += l2 * p
  double decay_factor;   // AdamW's decoupled decay: p *= decay_factor (1 - lr * wd), 1 for none
  double step_size;      // lr / (1 - beta1^t)
  double bias_correction2_sqrt;  // sqrt(1 - beta2^t)
  bool amsgrad, maximize;
};
// p, g, m (exp_avg), v (exp_avg_sq): [n]; vmax (max_exp_avg_sq): [n] with amsgrad, else null.
template <class T>
void adam_update(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, const AdamArgs& a);

// Muon's momentum: buf = beta * buf + (1 - beta) * g (PyTorch's lerp_), and
// out = nesterov ? g + beta * (buf - g) (lerp of g towards buf) : buf.
template <class T>
void muon_momentum(const T* g, T* buf, T* out, int64_t n, double beta, bool nesterov);

// p = p * decay_factor - scale * u (Muon's final step, u the orthogonalised update).
template <class T>
void scaled_update(T* p, const T* u, int64_t n, double decay_factor, double scale);

/// Explicit instantiations of the four updates for T, in the namespace where
/// it is expanded (the entry points, and each ISA copy's).
#define KILN_FUSED_UPDATES_INSTANTIATE(T)                                            \
  template void sgd_update<T>(T*, const T*, T*, int64_t, const SgdArgs&);           \
  template void adam_update<T>(T*, const T*, T*, T*, T*, int64_t, const AdamArgs&); \
  template void muon_momentum<T>(const T*, T*, T*, int64_t, double, bool);          \
  template void scaled_update<T>(T*, const T*, int64_t, double, double);

}  // namespace kiln::backend::cpu
