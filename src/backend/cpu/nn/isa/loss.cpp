// CPU kernels for cross-entropy and the pointwise losses. Cross-entropy does
// one pass per row for the max, one for sum(exp) (and sum(x) with label
// smoothing); its backward recomputes softmax from the saved logsumexp. The
// pointwise losses share one loop over a small functor per loss giving l,
// dl/dx and dl/dy.
// Compiled once per kernel ISA (NOTE [Per-ISA kernels] in CMakeLists.txt); the
// reference kernels are in ../loss_ref.cpp.
#include "src/backend/cpu/nn/loss.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kiln/core/parallel.h"
#include "src/backend/cpu/dispatch.h"
#include "src/backend/cpu/nn/isa/loss.h"
#include "src/backend/cpu/vec_math.h"

namespace kiln::backend::cpu::KILN_ISA_NS {

namespace {

constexpr int64_t kGrain = 16384;  // elements per parallel chunk, at least
constexpr int64_t kChunkRows = 64;  // rows per sweep block of the cross-entropy forward

template <class T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

// ---- cross-entropy ----

// logsumexp of one row of C, and sum(x) when wanted (label smoothing); with
// p, also the row's softmax into p.
template <class T, class A = acc_t<T>>
A row_max(const T* __restrict x, int64_t C) {
  A m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < C; ++j) m = std::max(m, A(x[j]));
  return std::isinf(m) ? A(0) : m;  // the shift: a row of -inf gives lse -inf, a +inf gives inf
}

// logsumexp of one row of C, and sum(x) when wanted (label smoothing).
template <class T, class A = acc_t<T>>
A row_lse(const T* __restrict x, int64_t C, bool want_sum, A& sum_x) {
  const A shift = row_max<T>(x, C);
  A s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < C; ++j) s += vexp(A(x[j]) - shift);
  if (want_sum) {
    A sx = 0;
#pragma omp simd reduction(+ : sx)
    for (int64_t j = 0; j < C; ++j) sx += A(x[j]);
    sum_x = sx;
  }
  return shift + std::log(s);
}

template <class T, class A = acc_t<T>>
A row_sum_x(const T* __restrict x, int64_t C) {
  A sx = 0;
#pragma omp simd reduction(+ : sx)
  for (int64_t j = 0; j < C; ++j) sx += A(x[j]);
  return sx;
}

// The same for rows [r0, r1) that also writes their softmax into p. Three
// sweeps over the block (max; exp stored, with no reduction, so rows overlap
// in the pipeline; sum and scale) instead of one row at a time: short rows
// (C of tens) are otherwise bound by each row's chain of dependent steps.
template <class T, class A = acc_t<T>>
void block_lse_probs(const T* __restrict x, int64_t C, int64_t r0, int64_t r1, T* __restrict p, A* __restrict lse) {
  for (int64_t r = r0; r < r1; ++r) lse[r] = row_max<T>(x + r * C, C);
  for (int64_t r = r0; r < r1; ++r) {
    const A shift = lse[r];
    const T* __restrict xr = x + r * C;
    T* __restrict pr = p + r * C;
#pragma omp simd
    for (int64_t j = 0; j < C; ++j) pr[j] = T(vexp(A(xr[j]) - shift));
  }
  for (int64_t r = r0; r < r1; ++r) {
    T* __restrict pr = p + r * C;
    A s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < C; ++j) s += A(pr[j]);
    const A inv = A(1) / s;
#pragma omp simd
    for (int64_t j = 0; j < C; ++j) pr[j] = T(A(pr[j]) * inv);
    lse[r] += std::log(s);
  }
}

}  // namespace

int64_t first_bad_target(const Tensor& targets, int64_t classes, int64_t ignore_index) {
  int64_t bad = -1;
  dispatch_only<int32_t, int64_t>(targets.dtype(), [&](auto tag) {
    using I = typename decltype(tag)::type;
    const I* t = static_cast<const I*>(targets.data_ptr());
    for (int64_t r = 0; r < targets.numel(); ++r)
      if ((int64_t(t[r]) < 0 || int64_t(t[r]) >= classes) && int64_t(t[r]) != ignore_index) {
        bad = r;
        return;
      }
  });
  return bad;
}

void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& weights, int64_t ignore_index,
                   double label_smoothing, const Tensor& lse, const Tensor& probs, const Tensor& rows, double* total,
                   double* weight_sum) {
  const int64_t R = targets.numel();
  const int64_t C = R ? logits.numel() / R : 0;
  dispatch_only<bfloat16, float, double>(logits.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    dispatch_only<int32_t, int64_t>(targets.dtype(), [&](auto itag) {
      using I = typename decltype(itag)::type;
      const T* xp = static_cast<const T*>(logits.data_ptr());
      const I* tp = static_cast<const I*>(targets.data_ptr());
      const T* wp = ptr_or_null<T>(weights);
      A* lp = static_cast<A*>(lse.data_ptr());
      T* pp = probs.defined() ? static_cast<T*>(probs.data_ptr()) : nullptr;
      T* op = rows.defined() ? static_cast<T*>(rows.data_ptr()) : nullptr;
      const A s = A(label_smoothing);
      const int64_t per_chunk = std::max<int64_t>(1, kGrain / std::max<int64_t>(C, 1));
      const int64_t chunks = (R + per_chunk - 1) / per_chunk;
      std::vector<double> part(size_t(2 * chunks), 0.0);  // per chunk: sum(loss), sum(w)
      parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t c = lo; c < hi; ++c) {
          double tot = 0, wsum = 0;
          const int64_t r0 = c * per_chunk, r1 = std::min(R, (c + 1) * per_chunk);
          // With probs: the chunk's lse and softmax first, in sweeps over blocks of rows.
          for (int64_t b0 = r0; pp && b0 < r1; b0 += kChunkRows)
            block_lse_probs<T>(xp, C, b0, std::min(r1, b0 + kChunkRows), pp, lp);
          for (int64_t r = r0; r < r1; ++r) {
            const int64_t t = int64_t(tp[r]);
            if (t == ignore_index) {
              lp[r] = A(0);
              if (op) op[r] = T(0);
              continue;
            }
            const T* x = xp + r * C;
            A sum_x = 0;
            A l;
            if (pp) {
              l = lp[r];
              if (s != A(0)) sum_x = row_sum_x<T>(x, C);
            } else {
              l = row_lse(x, C, s != A(0), sum_x);
            }
            const A w = wp ? A(wp[r]) : A(1);
            A loss = l - (A(1) - s) * A(x[t]);
            if (s != A(0)) loss -= s * sum_x / A(C);
            loss *= w;
            lp[r] = l;
            if (op) op[r] = T(loss);
            tot += double(loss);
            wsum += double(w);
          }
          part[size_t(2 * c)] = tot;
          part[size_t(2 * c + 1)] = wsum;
        }
      });
      double tot = 0, wsum = 0;
      for (int64_t c = 0; c < chunks; ++c) {
        tot += part[size_t(2 * c)];
        wsum += part[size_t(2 * c + 1)];
      }
      *total = tot;
      *weight_sum = wsum;
    });
    });
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& weights,
                            int64_t ignore_index, double label_smoothing, const Tensor& lse, const Tensor& probs,
                            const Tensor& grad, double scale, const Tensor& grad_logits) {
  const int64_t R = targets.numel();
  const int64_t C = R ? logits.numel() / R : 0;
  dispatch_only<bfloat16, float, double>(logits.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    dispatch_only<int32_t, int64_t>(targets.dtype(), [&](auto itag) {
      using I = typename decltype(itag)::type;
      const T* xp = static_cast<const T*>(logits.data_ptr());
      const I* tp = static_cast<const I*>(targets.data_ptr());
      const T* wp = ptr_or_null<T>(weights);
      const A* lp = static_cast<const A*>(lse.data_ptr());
      const T* pp = probs.defined() ? static_cast<const T*>(probs.data_ptr()) : nullptr;
      const T* gp = static_cast<const T*>(grad.data_ptr());
      const bool per_row = grad.numel() == R && R != 1;
      T* out = static_cast<T*>(grad_logits.data_ptr());
      const A s = A(label_smoothing), uniform = s / A(C), hit = A(1) - s;
      parallel_for(0, R, std::max<int64_t>(1, kGrain / std::max<int64_t>(C, 1)), [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
          T* o = out + r * C;
          const int64_t t = int64_t(tp[r]);
          if (t == ignore_index) {
            std::fill(o, o + C, T(0));
            continue;
          }
          const A coef = A(scale) * (wp ? A(wp[r]) : A(1)) * A(gp[per_row ? r : 0]);
          if (pp) {  // softmax saved by the forward
            const T* __restrict p = pp + r * C;
#pragma omp simd
            for (int64_t j = 0; j < C; ++j) o[j] = T(coef * (A(p[j]) - uniform));
            o[t] = T(coef * (A(p[t]) - uniform - hit));
            continue;
          }
          const T* __restrict x = xp + r * C;
          const A l = lp[r];
#pragma omp simd
          for (int64_t j = 0; j < C; ++j) o[j] = T(coef * (vexp(A(x[j]) - l) - uniform));
          o[t] = T(coef * (vexp(A(x[t]) - l) - uniform - hit));
        }
      });
    });
    });
}

// ---- pointwise losses ----

namespace {

// Each functor: loss(x, y, pw, beta) and grad(x, y, pw, beta, dx, dy).
struct Mse {
  template <class A> static A loss(A x, A y, A, A) { return (x - y) * (x - y); }
  template <class A> static void grad(A x, A y, A, A, A& dx, A& dy) {
    dx = A(2) * (x - y);
    dy = -dx;
  }
};
struct L1 {
  template <class A> static A sgn(A d) { return A((d > A(0)) - (d < A(0))); }
  template <class A> static A loss(A x, A y, A, A) { return std::abs(x - y); }
  template <class A> static void grad(A x, A y, A, A, A& dx, A& dy) {
    dx = sgn(x - y);
    dy = -dx;
  }
};
struct SmoothL1 {
  template <class A> static A loss(A x, A y, A, A beta) {
    A d = std::abs(x - y);
    return d < beta ? A(0.5) * d * d / beta : d - A(0.5) * beta;
  }
  template <class A> static void grad(A x, A y, A, A beta, A& dx, A& dy) {
    A d = x - y;
    dx = std::abs(d) < beta ? d / beta : L1::sgn(d);
    dy = -dx;
  }
};
struct Bce {  // x: probability
  template <class A> static A loss(A x, A y, A, A) {
    A lx = std::max(std::log(x), A(-100)), l1x = std::max(std::log1p(-x), A(-100));
    return -(y * lx + (A(1) - y) * l1x);
  }
  template <class A> static void grad(A x, A y, A, A, A& dx, A& dy) {
    dx = (x - y) / std::max((A(1) - x) * x, A(1e-12));  // PyTorch's clamp of the denominator
    dy = std::max(std::log1p(-x), A(-100)) - std::max(std::log(x), A(-100));
  }
};
struct BceWithLogits {
  template <class A> static A softplus_neg(A x) { return std::log1p(std::exp(-std::abs(x))) + std::max(-x, A(0)); }
  template <class A> static A loss(A x, A y, A pw, A) {
    return (A(1) - y) * x + (A(1) + (pw - A(1)) * y) * softplus_neg(x);
  }
  template <class A> static void grad(A x, A y, A pw, A, A& dx, A& dy) {
    dx = (A(1) - y) - (A(1) + (pw - A(1)) * y) / (A(1) + std::exp(x));  // sigmoid(-x) = 1 / (1 + e^x)
    dy = -x + (pw - A(1)) * softplus_neg(x);
  }
};

template <class F>
void dispatch_loss(PointwiseLoss kind, F&& fn) {
  switch (kind) {
    case PointwiseLoss::mse: return fn(Mse{});
    case PointwiseLoss::l1: return fn(L1{});
    case PointwiseLoss::smooth_l1: return fn(SmoothL1{});
    case PointwiseLoss::bce: return fn(Bce{});
    case PointwiseLoss::bce_with_logits: return fn(BceWithLogits{});
  }
}

}  // namespace

double pointwise_loss(PointwiseLoss kind, double beta, const Tensor& x, const Tensor& y, const Tensor& weight,
                      const Tensor& pos_weight, const Tensor& out) {
  if (kind == PointwiseLoss::smooth_l1 && beta == 0) kind = PointwiseLoss::l1;  // PyTorch: beta 0 is l1
  const int64_t n = x.numel();
  double result = 0;
  dispatch_only<bfloat16, float, double>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    dispatch_loss(kind, [&](auto fn) {
      using Fn = decltype(fn);
      const T* xp = static_cast<const T*>(x.data_ptr());
      const T* yp = static_cast<const T*>(y.data_ptr());
      const T* wp = ptr_or_null<T>(weight);
      const T* pp = ptr_or_null<T>(pos_weight);
      T* op = out.defined() ? static_cast<T*>(out.data_ptr()) : nullptr;
      const int64_t chunks = (n + kGrain - 1) / kGrain;
      std::vector<double> part(size_t(chunks), 0.0);
      parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t c = lo; c < hi; ++c) {
          const int64_t i0 = c * kGrain, i1 = std::min(n, i0 + kGrain);
          A s = 0;
#pragma omp simd reduction(+ : s)
          for (int64_t i = i0; i < i1; ++i) {
            A l = Fn::loss(A(xp[i]), A(yp[i]), pp ? A(pp[i]) : A(1), A(beta));
            if (wp) l *= A(wp[i]);
            if (op) op[i] = T(l);
            s += l;
          }
          part[size_t(c)] = double(s);
        }
      });
      for (double p : part) result += p;
    });
    });
  return result;
}

void pointwise_loss_backward(PointwiseLoss kind, double beta, const Tensor& x, const Tensor& y,
                             const Tensor& weight, const Tensor& pos_weight, const Tensor& grad, double scale,
                             const Tensor& gx, const Tensor& gy) {
  if (kind == PointwiseLoss::smooth_l1 && beta == 0) kind = PointwiseLoss::l1;
  const int64_t n = x.numel();
  dispatch_only<bfloat16, float, double>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    dispatch_loss(kind, [&](auto fn) {
      using Fn = decltype(fn);
      const T* xp = static_cast<const T*>(x.data_ptr());
      const T* yp = static_cast<const T*>(y.data_ptr());
      const T* wp = ptr_or_null<T>(weight);
      const T* pp = ptr_or_null<T>(pos_weight);
      const T* gp = static_cast<const T*>(grad.data_ptr());
      const bool full = grad.numel() == n && n != 1;
      T* gxp = gx.defined() ? static_cast<T*>(gx.data_ptr()) : nullptr;
      T* gyp = gy.defined() ? static_cast<T*>(gy.data_ptr()) : nullptr;
      parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) {
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i) {
          A dx, dy;
          Fn::grad(A(xp[i]), A(yp[i]), pp ? A(pp[i]) : A(1), A(beta), dx, dy);
          A k = A(scale) * A(gp[full ? i : 0]);
          if (wp) k *= A(wp[i]);
          if (gxp) gxp[i] = T(k * dx);
          if (gyp) gyp[i] = T(k * dy);
        }
      });
    });
    });
}

bool all_probabilities(const Tensor& x) {
  return dispatch(x.dtype(), [&](auto tag) -> bool {
    using T = typename decltype(tag)::type;
    if constexpr (is_floating(dtype_v<T>)) {
      const T* p = static_cast<const T*>(x.data_ptr());
      for (int64_t i = 0; i < x.numel(); ++i) {
        const double v = double(p[i]);
        if (!(v >= 0.0 && v <= 1.0)) return false;
      }
    }
    return true;
  });
}

// ---- reference kernels: f64, one element at a time ----

}  // namespace kiln::backend::cpu::KILN_ISA_NS
