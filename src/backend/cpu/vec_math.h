// exp for f32 written so that loops calling it auto-vectorize (std::exp does
// not without -ffast-math). Used by softmax and logsumexp.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace kiln::backend::cpu {

/// e^x for f32, within 2 ulp of std::exp over the whole range: exp(-inf) = 0,
/// exp(x > 88.73) = inf, NaN stays NaN; results below FLT_MIN are subnormal.
/// Method (Cephes): x = n ln2 + r with |r| <= ln2 / 2, e^r by a degree-6
/// polynomial, then 2^n applied in two halves so n may leave the normal range.
inline float exp_f32(float x) {
  x = x < -104.0f ? -104.0f : x;  // NaN compares false and passes through
  x = x > 89.0f ? 89.0f : x;
  // n = round(x / ln2) by the 1.5 * 2^23 trick (exact for |n| < 2^22).
  const float shifter = 12582912.0f;
  float n = (x * 1.44269504088896341f + shifter) - shifter;
  float r = x - n * 0.693359375f;  // ln2 in two parts: C1 exact in 9 bits
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  int32_t ni = int32_t(n == n ? n : 0.0f);  // NaN: p is NaN already
  int32_t n1 = ni / 2, n2 = ni - n1;  // both in [-75, 64]: normal powers of 2
  uint32_t b1 = uint32_t(n1 + 127) << 23, b2 = uint32_t(n2 + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, 4);
  std::memcpy(&s2, &b2, 4);
  return p * s1 * s2;
}

/// e^x in T's compute type (f64 uses std::exp).
template <class A>
inline A vexp(A x) {
  if constexpr (std::is_same_v<A, float>) return exp_f32(x);
  else return std::exp(x);
}

}  // namespace kiln::backend::cpu
