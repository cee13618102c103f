// The FMA probe: this machine's f32 fused-multiply-add peak in GFLOP/s, from
// independent FMA chains in vector registers on every thread.
#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <cstdint>

namespace {

// 16 independent chains hide the FMA latency (4 cycles x 2 pipes needs 8).
constexpr int kChains = 16;

#if defined(__AVX512F__)
using Vec = __m512;
constexpr int kLanes = 16;
inline Vec splat(float x) { return _mm512_set1_ps(x); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline float first(Vec v) { return _mm512_cvtss_f32(v); }
#elif defined(__FMA__)
using Vec = __m256;
constexpr int kLanes = 8;
inline Vec splat(float x) { return _mm256_set1_ps(x); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline float first(Vec v) { return _mm256_cvtss_f32(v); }
#else
using Vec = float;
constexpr int kLanes = 1;
inline Vec splat(float x) { return x; }
inline Vec fma(Vec a, Vec b, Vec c) { return a * b + c; }
inline float first(Vec v) { return v; }
#endif

// acc = acc * x + y on every chain, `iters` times; returns a value that
// depends on every chain so nothing is optimised away.
__attribute__((noinline)) float chains(int64_t iters) {
  Vec acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = splat(1.0f + 0.01f * float(j));
  const Vec x = splat(0.9999999f), y = splat(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kChains; ++j) acc[j] = fma(acc[j], x, y);
  }
  float s = 0;
  for (int j = 0; j < kChains; ++j) s += first(acc[j]);
  return s;
}

}  // namespace

/// GFLOP/s of `threads` threads each running `iters` rounds of the chains.
double fma_peak_gflops(int threads, int64_t iters) {
  volatile float sink = 0;
  auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
  {
    float s = chains(iters);
#pragma omp critical
    sink = sink + s;
  }
  double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double flops = double(threads) * double(iters) * kChains * kLanes * 2.0;
  return flops / sec * 1e-9;
}
