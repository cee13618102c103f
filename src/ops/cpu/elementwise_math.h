// f32 transcendentals for the elementwise functors, written without calls or
// branches so that the loops using them auto-vectorize (std::exp, std::tanh
// and std::erf do not without -ffast-math). Each is within a few ulp of the
// exact value (tests/ops/unary_test.cpp checks); f64 uses std::.
#pragma once

#include <cmath>
#include <type_traits>

#include "src/ops/cpu/vec_math.h"

namespace kiln::cpu::math {

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

/// erfc(z) for z >= 0.84 given z^2 = z2 + lo exactly (lo from an fma, so
/// that rounding z^2 does not cost digits deep in the tail): e^(-z^2) R(t)
/// with t = 1 / (1 + z/2) and R a degree-8 fit (1e-8 relative). Within ~7
/// ulp down to the subnormals; 0 beyond z = 10 (below the smallest
/// subnormal), so that gelu(-inf) = -inf * 0 is NaN like torch's.
inline float erfc_big_f32(float z, float z2, float lo) {
  float zc = z > 10.0f ? 10.0f : z;
  float t = 1.0f / (1.0f + 0.5f * zc);
  float r = 6.98797107e-2f;
  r = r * t - 1.50297597e-1f;
  r = r * t - 2.15417873e-2f;
  r = r * t + 1.39991924e-1f;
  r = r * t + 1.42446354e-1f;
  r = r * t + 2.57312924e-1f;
  r = r * t + 2.80259252e-1f;
  r = r * t + 2.82267392e-1f;
  r = r * t - 6.77643629e-6f;
  z2 = z2 > 100.0f ? 100.0f : z2;
  float v = exp_f32(-z2) * (1.0f - lo) * r;
  return z > 10.0f ? 0.0f : v;
}

/// erf for f32 within 2 ulp; NaN stays NaN.
inline float erf_f32(float x) {
  float ax = std::fabs(x);
  float x2 = x * x;
  float big = std::copysign(1.0f - erfc_big_f32(ax, x2, std::fma(x, x, -x2)), x);
  return ax < 0.84f ? erf_small_f32(x) : big;
}

/// The standard normal CDF Phi(x) = (1 + erf(x / sqrt 2)) / 2, taken from
/// erfc in the lower tail so that Phi(-12) keeps its digits.
inline float normal_cdf_f32(float x) {
  float z = x * 0.707106781186547524f;
  float az = std::fabs(z);
  float x2 = x * x;
  float lo = std::fma(x, x, -x2);  // z^2 = (x2 + lo) / 2 exactly
  float tail = 0.5f * erfc_big_f32(az, 0.5f * x2, 0.5f * lo);
  float big = z < 0.0f ? tail : 1.0f - tail;
  return az < 0.84f ? 0.5f + 0.5f * erf_small_f32(z) : big;
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

}  // namespace kiln::cpu::math
