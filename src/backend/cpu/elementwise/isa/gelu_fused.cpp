// Fused GELU (tanh form) kernels of linear_gelu (../gelu_fused.h), compiled
// once per kernel ISA (NOTE [Per-ISA kernels] in CMakeLists.txt); the
// reference is ../gelu_fused_ref.cpp. Letter legend: R rows, O columns.
#include "src/backend/cpu/elementwise/isa/gelu_fused.h"

#include <algorithm>
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

}  // namespace

// The elementwise GeluTanh and GeluTanhBackward formulas (elementwise_ops.h)
// sharing one exponential: y = x / (1 + e^-v), s = 1 / (1 + e^-v), d = s + x
// s (1 - s) v'. `omp simd`: y and d may alias u at the same index (each
// vector of u is loaded before its results are stored).
void gelu_tanh_with_grad(const Tensor& u, const Tensor& y, const Tensor& d) {
  by_dtype(u.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = Compute<T>;
    const T* up = static_cast<const T*>(u.data_ptr());
    T* yp = static_cast<T*>(y.data_ptr());
    C* dp = d.defined() ? static_cast<C*>(d.data_ptr()) : nullptr;
    constexpr C k2 = C(2 * fn::kSqrt2OverPi), kap = C(fn::kGeluKappa), kap3 = C(3 * fn::kGeluKappa);
    parallel_for(0, u.numel(), kGrain, [&](int64_t lo, int64_t hi) {
      if (dp) {
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i) {
          const C x = C(up[i]);
          const C v = k2 * (x + kap * x * x * x);
          const C den = C(1) + math::exp(-v);
          const C s = C(1) / den;
          const C dv = k2 * (C(1) + kap3 * x * x);
          yp[i] = T(x / den);
          dp[i] = s + x * s * (C(1) - s) * dv;
        }
      } else {
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i) {
          const C x = C(up[i]);
          const C v = k2 * (x + kap * x * x * x);
          yp[i] = T(x / (C(1) + math::exp(-v)));
        }
      }
    });
  });
}

void gelu_grad_bias(const Tensor& g, const Tensor& d, const Tensor& gu, const Tensor& gb) {
  const int64_t O = gu.dim() == 0 ? 1 : gu.size(gu.dim() - 1);
  const int64_t R = O == 0 ? 0 : gu.numel() / O;
  by_dtype(gu.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = Compute<T>;
    const T* gp = static_cast<const T*>(g.data_ptr());
    const C* dp = static_cast<const C*>(d.data_ptr());
    T* op = static_cast<T*>(gu.data_ptr());
    if (!gb.defined()) {
      parallel_for(0, R * O, kGrain, [&](int64_t lo, int64_t hi) {
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i) op[i] = T(C(gp[i]) * dp[i]);
      });
      return;
    }
    // Each block of kRowBlock rows sums its rows into partial[block]; the
    // blocks are then added in order.
    const int64_t blocks = (R + kRowBlock - 1) / kRowBlock;
    std::vector<C> partial(size_t(std::max<int64_t>(blocks, 1) * O), C(0));
    const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(1, kRowBlock * O));
    parallel_for(0, blocks, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t blk = lo; blk < hi; ++blk) {
        C* acc = partial.data() + blk * O;
        const int64_t r1 = std::min(R, (blk + 1) * kRowBlock);
        for (int64_t r = blk * kRowBlock; r < r1; ++r) {
          const T* gr = gp + r * O;
          const C* dr = dp + r * O;
          T* orow = op + r * O;
#pragma omp simd
          for (int64_t o = 0; o < O; ++o) {
            const T v = T(C(gr[o]) * dr[o]);
            orow[o] = v;
            acc[o] += C(v);
          }
        }
      }
    });
    T* bp = static_cast<T*>(gb.data_ptr());
    std::vector<C> total(size_t(O), C(0));
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const C* acc = partial.data() + blk * O;
      for (int64_t o = 0; o < O; ++o) total[size_t(o)] += acc[o];
    }
    for (int64_t o = 0; o < O; ++o) bp[o] = T(total[size_t(o)]);
  });
}

}  // namespace kiln::backend::cpu::KILN_ISA_NS
