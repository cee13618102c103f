// The fused optimizer updates (contracts in ../fused_updates.h), compiled once
// per kernel ISA (NOTE [Per-ISA kernels] in CMakeLists.txt).
#include "src/backend/cpu/optim/fused_updates.h"

#include <cmath>
#include <type_traits>

#include "kiln/core/parallel.h"
#include "src/backend/cpu/optim/isa/fused_updates.h"

namespace kiln::backend::cpu::KILN_ISA_NS {

namespace {

// Elements below which an update runs on one thread: about 1 MB of traffic,
// where a fork-join starts to pay for itself.
constexpr int64_t kGrain = 1 << 15;

// Every chunk body is one out-of-line function: inlined into parallel_for's
// single-thread path, GCC 12 leaves these loops scalar (measured: 15x slower).
#define KILN_CHUNK __attribute__((noinline))

}  // namespace

// The loops below are branch-free so they vectorise: a disabled term is a
// multiplication by 1 or an addition of 0 * x, which leaves every finite value
// bit-for-bit unchanged.

template <class T>
void sgd_update(T* p, const T* g, T* buf, int64_t n, const SgdArgs& a) {
  const T lr = T(a.lr), mom = T(a.momentum), damp = T(1.0 - a.dampening), wd = T(a.weight_decay);
  const T sign = a.maximize ? T(-1) : T(1);
  if (!buf) {
    parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) KILN_CHUNK {
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) p[i] = p[i] - lr * (sign * g[i] + wd * p[i]);
    });
    return;
  }
  // The flags pick a loop at compile time (a branch inside would stop vectorisation).
  auto run = [&](auto first, auto nesterov) {
    parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) KILN_CHUNK {
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) {
        T d = sign * g[i] + wd * p[i];
        T b;
        if constexpr (first) b = d;
        else b = buf[i] * mom + damp * d;
        buf[i] = b;
        if constexpr (nesterov) p[i] = p[i] - lr * (d + mom * b);
        else p[i] = p[i] - lr * b;
      }
    });
  };
  using yes = std::true_type;
  using no = std::false_type;
  if (a.first) a.nesterov ? run(yes{}, yes{}) : run(yes{}, no{});
  else a.nesterov ? run(no{}, yes{}) : run(no{}, no{});
}

template <class T>
void adam_update(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, const AdamArgs& a) {
  const T b1 = T(a.beta1), b2 = T(a.beta2), c1 = T(1.0 - a.beta1), c2 = T(1.0 - a.beta2);
  const T eps = T(a.eps), l2 = T(a.l2), keep = T(a.decay_factor), bc2 = T(a.bias_correction2_sqrt);
  const T neg_step = T(-a.step_size);
  const T sign = a.maximize ? T(-1) : T(1);
  auto run = [&](auto amsgrad) {
    parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) KILN_CHUNK {
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) {
        T pi = p[i] * keep;
        T gi = sign * g[i] + l2 * pi;
        T mi = m[i] * b1 + c1 * gi;
        T vi = v[i] * b2 + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        if constexpr (amsgrad) {
          vi = vmax[i] > vi ? vmax[i] : vi;  // the running max, used in place of v
          vmax[i] = vi;
        }
        p[i] = pi + neg_step * (mi / (std::sqrt(vi) / bc2 + eps));
      }
    });
  };
  vmax ? run(std::true_type{}) : run(std::false_type{});
}

template <class T>
void muon_momentum(const T* g, T* buf, T* out, int64_t n, double beta, bool nesterov) {
  // PyTorch's lerp(a, b, w) is a + w (b - a) for w < 0.5 and b - (b - a)(1 - w)
  // otherwise; w is fixed here, so each form is chosen outside the loop.
  const T w_buf = T(1.0 - beta), w_out = T(beta);
  auto lerp = [](T a, T b, T w, auto low) -> T {
    if constexpr (low) return a + w * (b - a);
    else return b - (b - a) * (T(1) - w);
  };
  auto run = [&](auto buf_low, auto out_low, auto nest) {
    parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) KILN_CHUNK {
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) {
        T b = lerp(buf[i], g[i], w_buf, buf_low);
        buf[i] = b;
        if constexpr (nest) out[i] = lerp(g[i], b, w_out, out_low);
        else out[i] = b;
      }
    });
  };
  using yes = std::true_type;
  using no = std::false_type;
  const bool buf_low = w_buf < T(0.5), out_low = w_out < T(0.5);
  if (!nesterov) buf_low ? run(yes{}, no{}, no{}) : run(no{}, no{}, no{});
  else if (buf_low) out_low ? run(yes{}, yes{}, yes{}) : run(yes{}, no{}, yes{});
  else out_low ? run(no{}, yes{}, yes{}) : run(no{}, no{}, yes{});
}

template <class T>
void scaled_update(T* p, const T* u, int64_t n, double decay_factor, double scale) {
  const T keep = T(decay_factor), neg = T(-scale);
  parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) KILN_CHUNK {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) p[i] = p[i] * keep + neg * u[i];
  });
}

KILN_FUSED_UPDATES_INSTANTIATE(float)
KILN_FUSED_UPDATES_INSTANTIATE(double)

}  // namespace kiln::backend::cpu::KILN_ISA_NS
