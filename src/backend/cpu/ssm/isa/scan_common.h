// Helpers shared by the two scan kernels of one ISA copy (isa/ssm.cpp, the
// sequential recurrence; isa/ssm_chunked.cpp, the chunked matrix form):
// pointer access, the angle wrap, the rotation and one step's gates.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "src/backend/cpu/ssm/ssm.h"

namespace kiln::backend::cpu::KILN_ISA_NS {
namespace scan {

constexpr double kPi = 3.14159265358979323846;

template <class T>
const T* cp(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}
template <class T>
T* mp(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

// x - 2 pi floor(x / 2 pi): the angle state in [0, 2 pi), as upstream's step.
template <class T>
T wrap(T x) {
  const T two_pi = T(2 * kPi);
  return x - two_pi * std::floor(x / two_pi);
}

// sin and cos of x for f32 in straight-line code that vectorises (libm's
// sinf / cosf are calls, one lane at a time): x = j pi/2 + r with |r| <= pi/4
// (pi/2 in three parts, so r is exact to ~1e-7 for the angle state's
// |x| < 2 pi), the minimax polynomials of Cephes' sinf / cosf on r, and the
// quadrant j mod 4 choosing and signing them. Error ~1 ulp of 1. f64: libm.
template <class T>
inline void sin_cos(T x, T& sn, T& cs) {
  if constexpr (std::is_same_v<T, float>) {
    const float j = std::floor(x * 0.636619772367581343f + 0.5f);
    const float r = ((x - j * 1.5703125f) - j * 4.837512969970703125e-4f) - j * 7.549789948768648e-8f;
    const float z = r * r;
    const float ps = ((-1.9515295891e-4f * z + 8.3321608736e-3f) * z - 1.6666654611e-1f) * z * r + r;
    const float pc = ((2.443315711809948e-5f * z - 1.388731625493765e-3f) * z + 4.166664568298827e-2f) * z * z -
                     0.5f * z + 1.0f;
    const int q = static_cast<int>(j) & 3;
    const float s0 = (q & 1) ? pc : ps, c0 = (q & 1) ? ps : pc;
    sn = (q & 2) ? -s0 : s0;
    cs = ((q + 1) & 2) ? -c0 : c0;
  } else {
    sn = std::sin(x);
    cs = std::cos(x);
  }
}

// out = rot(in + bias, theta): pairs (2i, 2i + 1) for i < R turned by theta_i
// (cos cs[i], sin sn[i]), the rest (n >= 2R) passed through.
template <class T>
inline void rotate(const T* __restrict in, const T* __restrict bias, const T* __restrict cs, const T* __restrict sn,
                   int64_t N, int64_t R, T* __restrict out) {
#pragma omp simd
  for (int64_t i = 0; i < R; ++i) {
    const T x0 = in[2 * i] + bias[2 * i], x1 = in[2 * i + 1] + bias[2 * i + 1];
    out[2 * i] = x0 * cs[i] - x1 * sn[i];
    out[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
  }
#pragma omp simd
  for (int64_t n = 2 * R; n < N; ++n) out[n] = in[n] + bias[n];
}

struct Dims {
  int64_t B, T, H, N, P, R, chunk, nc;
  int64_t QH;  // heads of q and k: H, or 1 when every head reads the same q, k rows (Mamba3Scan)
};

// The row of q and k [B, T, QH, N] for row r = (b T + t) H + h of [B, T, H].
inline int64_t qk_row(const Dims& d, int64_t r) { return d.QH == d.H ? r : r / d.H; }

inline Dims dims_of(const Mamba3Scan& s) {
  Dims d{};
  d.B = s.q.shape()[0];
  d.T = s.q.shape()[1];
  d.H = s.v.shape()[2];
  d.QH = s.q.shape()[2];
  d.N = s.q.shape()[3];
  d.P = s.v.shape()[3];
  d.R = s.angles.shape()[3];
  d.chunk = std::max<int64_t>(1, s.chunk);
  d.nc = (d.T + d.chunk - 1) / d.chunk;
  return d;
}

// One step's gates from its raw inputs.
template <class T>
struct Gates {
  T s, alpha, beta, gamma;
  Gates(T adt, T dt, T trap) {
    s = T(1) / (T(1) + std::exp(-trap));
    alpha = std::exp(adt);
    beta = (T(1) - s) * dt * alpha;
    gamma = s * dt;
  }
};

/// The backward's per-(b, h) partials summed over the batch, in batch order
/// (bitwise the same on any thread count). part is [B, H, 2N + 1]: dq_bias's
/// N, dk_bias's N, then dD's one; dq_bias and dk_bias are [H, N], dD [H] or null.
template <class T>
void sum_batch_partials(const T* part, int64_t B, int64_t H, int64_t N, T* dqb, T* dkb, T* dD) {
  const int64_t stride = 2 * N + 1;
  for (int64_t hh = 0; hh < H; ++hh) {
    for (int64_t n = 0; n < N; ++n) {
      T aq = 0, ak = 0;
      for (int64_t b = 0; b < B; ++b) {
        const T* pp = part + (b * H + hh) * stride;
        aq += pp[n];
        ak += pp[N + n];
      }
      dqb[hh * N + n] = aq;
      dkb[hh * N + n] = ak;
    }
    if (dD) {
      T a = 0;
      for (int64_t b = 0; b < B; ++b) a += part[(b * H + hh) * stride + 2 * N];
      dD[hh] = a;
    }
  }
}

}  // namespace scan
}  // namespace kiln::backend::cpu::KILN_ISA_NS
