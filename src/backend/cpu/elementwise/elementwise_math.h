// f32 transcendentals for the elementwise functors, written without calls or
// branches so that the loops using them auto-vectorize (std::exp, std::tanh
// and std::erf do not without -ffast-math). Each is within a few ulp of the
// exact value (tests/ops/unary_test.cpp checks); f64 uses std::.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "src/backend/cpu/vec_math.h"

namespace kiln::backend::cpu::math {

/// c ? b : a through bit masks. A plain select on a value computed by a long
/// formula can make GCC branch around the formula, which stops the loop from
/// vectorizing; masks keep it straight-line.
inline float blend(bool c, float a, float b) {
  uint32_t m = c ? ~0u : 0u, ab, bb;
  std::memcpy(&ab, &a, 4);
  std::memcpy(&bb, &b, 4);
  ab = (ab & ~m) | (bb & m);
  float r;
  std::memcpy(&r, &ab, 4);
  return r;
}

/// tanh for f32 (Cephes tanhf): an odd polynomial for |x| < 0.625, else
/// 1 - 2 / (e^(2|x|) + 1) with the sign restored; NaN stays NaN.
inline float tanh_f32(float x) {
  float ax = std::fabs(x);
  float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  float small = p * z * x + x;
  float big = 1.0f - 2.0f / (exp_f32(2.0f * ax) + 1.0f);
  big = std::copysign(big, x);
  return ax < 0.625f ? small : big;
}

/// erf(x) / x for |x| < 0.84 as a degree-5 polynomial in x^2 (fitted to
/// 5e-9 relative error; tools: least squares on Chebyshev nodes).
inline float erf_small_f32(float x) {
  float u = x * x;
  float p = -6.35955366e-4f;
  p = p * u + 5.05830022e-3f;
  p = p * u - 2.68065985e-2f;
  p = p * u + 1.12828091e-1f;
  p = p * u - 3.76125783e-1f;
  p = p * u + 1.12837911e+0f;
  return x * p;
}

/// erfc(z) for z >= 0 given lo, the rounding error of z^2 (z^2 = z2 + lo
/// exactly, lo from an fma, so that rounding z^2 does not cost digits deep in
/// the tail), and ez2 = e^(-min(z2, 100)): e^(-z^2) R(t) with t = 1 / (1 +
/// z/2) and R a degree-10 fit over z in [0, 10] (6e-9 relative). Within a few
/// ulp down to the subnormals; 0 beyond z = 10 (below the smallest
/// subnormal), so gelu(-inf) = -inf * 0 is NaN like torch's. Taking the
/// exponential from the caller lets GELU's derivative share it with phi(x).
inline float erfc_f32_exp(float z, float ez2, float lo) {
  float zc = z > 10.0f ? 10.0f : z;
  float t = 1.0f / (1.0f + 0.5f * zc);
  float r = 2.77467165e-2f;
  r = r * t - 2.09848940e-1f;
  r = r * t + 6.40443206e-1f;
  r = r * t - 9.66011405e-1f;
  r = r * t + 6.83367193e-1f;
  r = r * t - 2.51357019e-1f;
  r = r * t + 2.85069734e-1f;
  r = r * t + 2.23447964e-1f;
  r = r * t + 2.85289794e-1f;
  r = r * t + 2.81844199e-1f;
  r = r * t + 8.56950101e-6f;
  float v = ez2 * (1.0f - lo) * r;
  return z > 10.0f ? 0.0f : v;
}

/// erfc(z) for z >= 0 given z^2 = z2 + lo exactly (erfc_f32_exp).
inline float erfc_f32(float z, float z2, float lo) {
  z2 = z2 > 100.0f ? 100.0f : z2;
  return erfc_f32_exp(z, exp_f32(-z2), lo);
}

/// erf for f32 within 2 ulp; NaN stays NaN.
inline float erf_f32(float x) {
  float ax = std::fabs(x);
  float x2 = x * x;
  float big = std::copysign(1.0f - erfc_f32(ax, x2, std::fma(x, x, -x2)), x);
  return ax < 0.84f ? erf_small_f32(x) : big;
}

/// The standard normal CDF Phi(x) = erfc(-x / sqrt 2) / 2, from erfc(|x| /
/// sqrt 2) on both sides, so that Phi(-12) keeps its digits.
inline float normal_cdf_f32(float x) {
  float x2 = x * x;
  float lo = std::fma(x, x, -x2);  // (x / sqrt 2)^2 = (x2 + lo) / 2 exactly
  float tail = 0.5f * erfc_f32(std::fabs(x) * 0.707106781186547524f, 0.5f * x2, 0.5f * lo);
  return x < 0.0f ? tail : 1.0f - tail;
}

/// Phi(x) + x phi(x), the exact GELU's derivative, with one exponential for
/// both terms: e^(-x^2 / 2) is phi's and, clamped at e^-100, erfc's. Bit for
/// bit normal_cdf_f32(x) + x * (exp_f32(-0.5 x x) / sqrt(2 pi)): halving x^2
/// is exact, so -(0.5 x^2) and (-0.5 x) x round alike.
inline float gelu_grad_f32(float x) {
  float x2 = x * x;
  float lo = std::fma(x, x, -x2);
  float h = 0.5f * x2;
  float e = exp_f32(-h);
  float ez2 = h > 100.0f ? exp_f32(-100.0f) : e;  // a constant after folding
  float tail = 0.5f * erfc_f32_exp(std::fabs(x) * 0.707106781186547524f, ez2, 0.5f * lo);
  float cdf = x < 0.0f ? tail : 1.0f - tail;
  return cdf + x * (e * 0.39894228040143267794f);
}

/// Natural log for f32 within ~2 ulp: x = m 2^e with m in [sqrt(1/2),
/// sqrt(2)), log(m) = f - f^2/2 + f^3 P(f) with f = m - 1 and P a degree-7
/// fit (7e-8 relative), e ln2 added in two parts. Subnormals are scaled
/// first; log(0) = -inf, log(x < 0) = NaN, log(inf) = inf.
inline float log_f32(float x) {
  // (int selects rather than bools: GCC vectorizes those.)
  float xs = x < 1.17549435e-38f ? x * 8388608.0f : x;  // subnormals times 2^23
  int32_t sub = x < 1.17549435e-38f ? 23 : 0;  // also for 0 and negatives (handled below)
  uint32_t u;
  std::memcpy(&u, &xs, 4);
  int32_t e = int32_t((u >> 23) & 0xffu) - 127;
  uint32_t mu = (u & 0x007fffffu) | 0x3f800000u;
  float m;
  std::memcpy(&m, &mu, 4);
  int32_t big = m > 1.41421356f ? 1 : 0;
  m = m > 1.41421356f ? 0.5f * m : m;
  float ef = float(e + big - sub);
  float f = m - 1.0f;  // exact
  float p = -7.97379240e-2f;
  p = p * f + 1.26555100e-1f;
  p = p * f - 1.29893333e-1f;
  p = p * f + 1.42099708e-1f;
  p = p * f - 1.66415796e-1f;
  p = p * f + 2.00011998e-1f;
  p = p * f - 2.50003040e-1f;
  p = p * f + 3.33333313e-1f;
  float f2 = f * f;
  float r = (ef * -2.12194440e-4f + (p * f2 * f - 0.5f * f2)) + f + ef * 0.693359375f;
  // Special inputs: 0 -> -inf, inf -> inf, negative or NaN -> NaN.
  const float inf = __builtin_inff();
  float sp = x == 0.0f ? -inf : x > 0.0f ? x : __builtin_nanf("");
  return blend((x > 0.0f) & (x < inf), sp, r);
}

/// log(1 + x) for f32: log(u) x / (u - 1) with u = 1 + x corrects the
/// rounding of u (Goldberg's trick), so tiny x keep their digits.
inline float log1p_f32(float x) {
  float u = 1.0f + x;
  float d = u - 1.0f;
  float r = log_f32(u) * (x / d);
  r = blend(d == 0.0f, r, x);  // tiny x: log1p(x) = x
  return blend(u == __builtin_inff(), r, u);
}

/// c ? b : a, straight-line for f32 (see blend).
template <class C>
inline C select(bool c, C a, C b) {
  if constexpr (std::is_same_v<C, float>) return blend(c, a, b);
  else return c ? b : a;
}

template <class C>
inline C exp(C x) {
  if constexpr (std::is_same_v<C, float>) return exp_f32(x);
  else return std::exp(x);
}

template <class C>
inline C tanh(C x) {
  if constexpr (std::is_same_v<C, float>) return tanh_f32(x);
  else return std::tanh(x);
}

/// 1 / (1 + e^-x): 0 for very negative x, 1 for large x.
template <class C>
inline C sigmoid(C x) {
  return C(1) / (C(1) + exp(-x));
}


template <class C>
inline C erf(C x) {
  if constexpr (std::is_same_v<C, float>) return erf_f32(x);
  else return std::erf(x);
}

template <class C>
inline C normal_cdf(C x) {
  if constexpr (std::is_same_v<C, float>) return normal_cdf_f32(x);
  else return C(0.5) * std::erfc(-x * C(0.70710678118654752440));
}


template <class C>
inline C log(C x) {
  if constexpr (std::is_same_v<C, float>) return log_f32(x);
  else return std::log(x);
}

template <class C>
inline C log1p(C x) {
  if constexpr (std::is_same_v<C, float>) return log1p_f32(x);
  else return std::log1p(x);
}

}  // namespace kiln::backend::cpu::math
