// Fused GELU (tanh form) kernels of linear_gelu (../gelu_fused.h), compiled
// once per kernel ISA (NOTE [Per-ISA kernels] in CMakeLists.txt); the
// reference is ../gelu_fused_ref.cpp. Letter legend: R rows, O columns.
#include "src/backend/cpu/elementwise/isa/gelu_fused.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/core/parallel.h"
#include "src/backend/cpu/elementwise/elementwise_math.h"
#include "src/backend/cpu/elementwise/elementwise_ops.h"

namespace kiln::backend::cpu::KILN_ISA_NS {

namespace {

template <class T>
using Compute = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Loads and stores in the compute dtype, branch-free so the loops vectorise:
// bf16 is handled as its 16 bits (bfloat16's own conversions, whose NaN test
// is a branch, left the bf16 loops scalar: a quarter of the bf16 DiT step).
template <class T>
struct Io {
  using S = T;
  static T load(T x) { return x; }
  static T store(T x) { return x; }
};
template <>
struct Io<bfloat16> {
  using S = uint16_t;
  static float load(uint16_t b) {
    const uint32_t u = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  // Round to nearest even, NaN kept quiet: bfloat16(float) bit for bit.
  static uint16_t store(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, nan = (u >> 16) | 0x40u;
    return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  }
};

template <class Fn>
void by_dtype(DType t, Fn&& fn) {
  if (t == kF32) fn(type_tag<float>{});
  else if (t == kF64) fn(type_tag<double>{});
  else fn(type_tag<bfloat16>{});
}

// About 16K elements per task: a few microseconds of exponentials.
constexpr int64_t kGrain = int64_t(1) << 14;

// Rows per block of the bias-gradient sums: the blocks' partial sums are added
// in block order, the same for every thread count.
constexpr int64_t kRowBlock = 32;

// Every chunk is one out-of-line function with its calls inlined: inlined into
// parallel_for's lambdas, GCC 12 leaves such loops scalar (as the fused
// optimizer updates found).
#define KILN_GELU_CHUNK __attribute__((noinline, flatten))

constexpr double k2 = 2 * fn::kSqrt2OverPi, kap = fn::kGeluKappa, kap3 = 3 * fn::kGeluKappa;

// The elementwise GeluTanh and GeluTanhBackward formulas (elementwise_ops.h)
// sharing one exponential: y = x / (1 + e^-v), s = 1 / (1 + e^-v), d = s + x
// s (1 - s) v'. `omp simd`: y and d may alias u at the same index (each
// vector of u is loaded before its results are stored).
template <class T>
KILN_GELU_CHUNK void gelu_chunk(const typename Io<T>::S* up, typename Io<T>::S* yp, Compute<T>* dp, int64_t lo,
                                int64_t hi) {
  using C = Compute<T>;
#pragma omp simd
  for (int64_t i = lo; i < hi; ++i) {
    const C x = Io<T>::load(up[i]);
    const C v = C(k2) * (x + C(kap) * x * x * x);
    const C den = C(1) + math::exp(-v);
    const C s = C(1) / den;
    const C dv = C(k2) * (C(1) + C(kap3) * x * x);
    yp[i] = Io<T>::store(x / den);
    dp[i] = s + x * s * (C(1) - s) * dv;
  }
}

template <class T>
KILN_GELU_CHUNK void gelu_only_chunk(const typename Io<T>::S* up, typename Io<T>::S* yp, int64_t lo, int64_t hi) {
  using C = Compute<T>;
#pragma omp simd
  for (int64_t i = lo; i < hi; ++i) {
    const C x = Io<T>::load(up[i]);
    const C v = C(k2) * (x + C(kap) * x * x * x);
    yp[i] = Io<T>::store(x / (C(1) + math::exp(-v)));
  }
}

template <class T>
KILN_GELU_CHUNK void grad_chunk(const typename Io<T>::S* gp, const Compute<T>* dp, typename Io<T>::S* op, int64_t lo,
                                int64_t hi) {
#pragma omp simd
  for (int64_t i = lo; i < hi; ++i) op[i] = Io<T>::store(Io<T>::load(gp[i]) * dp[i]);
}

// Rows [r0, r1) of gu = g d ([R, O]), their sums added into acc [O].
template <class T>
KILN_GELU_CHUNK void grad_rows(const typename Io<T>::S* gp, const Compute<T>* dp, typename Io<T>::S* op, int64_t O,
                               int64_t r0, int64_t r1, Compute<T>* acc) {
  using C = Compute<T>;
  for (int64_t r = r0; r < r1; ++r) {
    const typename Io<T>::S* gr = gp + r * O;
    const C* dr = dp + r * O;
    typename Io<T>::S* orow = op + r * O;
#pragma omp simd
    for (int64_t o = 0; o < O; ++o) {
      const typename Io<T>::S v = Io<T>::store(Io<T>::load(gr[o]) * dr[o]);
      orow[o] = v;
      acc[o] += Io<T>::load(v);
    }
  }
}

}  // namespace

void gelu_tanh_with_grad(const Tensor& u, const Tensor& y, const Tensor& d) {
  by_dtype(u.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = typename Io<T>::S;
    const S* up = static_cast<const S*>(u.data_ptr());
    S* yp = static_cast<S*>(y.data_ptr());
    Compute<T>* dp = d.defined() ? static_cast<Compute<T>*>(d.data_ptr()) : nullptr;
    parallel_for(0, u.numel(), kGrain, [&](int64_t lo, int64_t hi) {
      if (dp) gelu_chunk<T>(up, yp, dp, lo, hi);
      else gelu_only_chunk<T>(up, yp, lo, hi);
    });
  });
}

void gelu_grad_bias(const Tensor& g, const Tensor& d, const Tensor& gu, const Tensor& gb) {
  const int64_t O = gu.dim() == 0 ? 1 : gu.size(gu.dim() - 1);
  const int64_t R = O == 0 ? 0 : gu.numel() / O;
  by_dtype(gu.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = Compute<T>;
    using S = typename Io<T>::S;
    const S* gp = static_cast<const S*>(g.data_ptr());
    const C* dp = static_cast<const C*>(d.data_ptr());
    S* op = static_cast<S*>(gu.data_ptr());
    if (!gb.defined()) {
      parallel_for(0, R * O, kGrain, [&](int64_t lo, int64_t hi) { grad_chunk<T>(gp, dp, op, lo, hi); });
      return;
    }
    // Each block of kRowBlock rows sums its rows into partial[block]; the
    // blocks are then added in order.
    const int64_t blocks = (R + kRowBlock - 1) / kRowBlock;
    std::vector<C> partial(size_t(std::max<int64_t>(blocks, 1) * O), C(0));
    const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(1, kRowBlock * O));
    parallel_for(0, blocks, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t blk = lo; blk < hi; ++blk)
        grad_rows<T>(gp, dp, op, O, blk * kRowBlock, std::min(R, (blk + 1) * kRowBlock), partial.data() + blk * O);
    });
    std::vector<C> total(size_t(O), C(0));
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const C* acc = partial.data() + blk * O;
      for (int64_t o = 0; o < O; ++o) total[size_t(o)] += acc[o];
    }
    T* bp = static_cast<T*>(gb.data_ptr());
    for (int64_t o = 0; o < O; ++o) bp[o] = T(total[size_t(o)]);
  });
}

}  // namespace kiln::backend::cpu::KILN_ISA_NS
