// What kiln's native environments (CartPole, Pendulum) share: Python's v**2,
// the checks a step makes before it touches any state, the uniform draws of
// a reset, and the step's output tensors. Letters: E environments.
// draw_uniform's arithmetic must not be contracted into fused multiply-adds:
// only files built with -ffp-contract=off call it (CMakeLists.txt).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "kiln/core/generator.h"
#include "kiln/rl/env.h"

namespace kiln::rl::detail {

/// std::pow(v, 2.0) as a call to glibc's pow (native_env.cpp is compiled
/// with -fno-builtin-pow, so the compiler cannot fold it into v * v).
double libm_pow2(double v);

/// NOTE [Python's squares]: Python evaluates v**2 with glibc's pow, which
/// is not always the rounded v * v (about 1 square in 1500 differs in the
/// last bit). glibc's pow (sysdeps/ieee754/dbl-64/e_pow.c, since 2.28) has
/// a worst-case error of 0.54 ULP after rounding: its result before the
/// final rounding is within 0.04 ULP of the exact value for any v used
/// here (0.009 from exp, at most 0.03 from log for |2 log v| <= 700). So
/// where the exact square v * v = hi + lo lies more than 0.04 ULP from a
/// rounding midpoint, pow returns the rounded square hi. The fast path
/// takes hi where |lo| <= 0.4 ULP (a midpoint is then at least 0.1 ULP
/// away), 80% of squares; the rest, and every v outside the range where
/// fma's residual is exact, call pow. Without hardware FMA it always calls pow.

/// Whether hi = v * v (rounded) is glibc's pow(v, 2.0) by the argument of
/// NOTE [Python's squares]. Branch-free, so loops over it vectorise.
inline bool square_is_pow(double v, double hi) {
#ifdef __FMA__
  const double lo = std::fma(v, v, -hi);  // exact there: v * v == hi + lo
  // ulp(hi) for a normal hi: its power of two times 2^-52; just below a
  // power of two the spacing halves, so a negative lo there is refused.
  const double binade = std::bit_cast<double>(std::bit_cast<uint64_t>(hi) & 0x7ff0000000000000ull);
  return (hi >= 0x1p-960) & (hi < 0x1p1000) & (std::abs(lo) <= 0.4 * 0x1p-52 * binade) & ((lo >= 0) | (hi != binade));
#else
  return false;
#endif
}

/// Gymnasium's `v**2`, bit for bit: glibc's pow(v, 2.0).
inline double python_square(double v) {
  const double hi = v * v;
  return square_is_pow(v, hi) ? hi : libm_pow2(v);
}

/// out[j] = python_square(v[j]) for j < n: the check over all of them (it
/// vectorises), then pow for those it refused (marked NaN; a NaN v gives NaN
/// either way).
inline void python_squares(const double* __restrict v, double* __restrict out, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    const double hi = v[j] * v[j];
    out[j] = square_is_pow(v[j], hi) ? hi : std::numeric_limits<double>::quiet_NaN();
  }
  for (int64_t j = 0; j < n; ++j)
    if (std::isnan(out[j])) out[j] = libm_pow2(v[j]);
}

/// n values uniform on [lo[k], hi[k]) from `gen`, drawn as uniform_ draws an
/// [n] f64 tensor: value k from the 53 high bits of stream words (2k, 2k + 1),
/// lo + (hi - lo) * u, kept below hi. Advances gen by ceil(n / 2) blocks.
inline void draw_uniform(Generator& gen, int n, const double* lo, const double* hi, double* out) {
  const uint64_t first = gen.advance(uint64_t(n + 1) / 2);
  for (int k = 0; k < n; ++k) {
    const auto w = gen.block(first + uint64_t(k) / 2);
    const int j = 2 * (k % 2);
    const double u = double(((uint64_t(w[j + 1]) << 32) | w[j]) >> 11) * 0x1p-53;
    const double v = lo[k] + (hi[k] - lo[k]) * u;
    out[k] = v < hi[k] ? v : std::nextafter(hi[k], lo[k]);
  }
}

/// Throws "[op] ..." unless reset() has run and `actions` is [E, *A] with
/// the action space's dtype. Value checks are the environment's own.
void check_actions(const char* op, const EnvSpec& spec, int64_t num_envs, bool was_reset, const Tensor& actions);

/// Throws "[op] ..." unless reset() has run and `state` is [E, width] f64;
/// `fields` names the columns ("x, x_dot, theta, theta_dot").
void check_state(const char* op, int64_t num_envs, bool was_reset, const Tensor& state, int64_t width,
                 const char* fields);

/// A step's outputs, uninitialised: obs and final_obs [E, *O] f32, reward
/// [E] f32, terminated and truncated [E] bool.
Transition empty_transition(const EnvSpec& spec, int64_t num_envs);

}  // namespace kiln::rl::detail
