// f32 transcendentals for the elementwise functors, written without calls or
// branches so that the loops using them auto-vectorize (std::exp and
// std::tanh do not without -ffast-math). Each is within ~2 ulp of the std::
// version; f64 and other types use std::.
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

}  // namespace kiln::cpu::math
