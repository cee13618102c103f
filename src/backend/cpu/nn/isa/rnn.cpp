// CPU kernels for the fused LSTM/GRU cell tails: rows of B in parallel, and
// within a row one straight-line loop over H per gate block, so the
// transcendentals (math::sigmoid / math::tanh, branch-free for f32)
// vectorize. Every element is computed independently, so results do not
// depend on the thread count.
// Compiled once per kernel ISA (NOTE [Per-ISA kernels] in CMakeLists.txt); the
// reference kernels are in ../rnn_ref.cpp.
#include "src/backend/cpu/nn/rnn.h"

#include <algorithm>
#include <cmath>

#include "kiln/core/parallel.h"
#include "src/backend/cpu/dispatch.h"
#include "src/backend/cpu/elementwise/elementwise_math.h"
#include "src/backend/cpu/nn/isa/rnn.h"

namespace kiln::backend::cpu::KILN_ISA_NS {

namespace {

using rnn_detail::cptr;
using rnn_detail::mptr;

constexpr int64_t kGrain = 8192;  // elements of [B, H] per parallel chunk, at least
// The same for lstm_cell_train (five transcendentals per element, ~40 us for
// a [32, 256] step on one thread, 25 us on two): it runs once per timestep on
// the recurrence's critical path, so a step is split over the threads.
constexpr int64_t kStepGrain = 2048;


// fn(lo, hi) over row ranges of B rows of width H.
template <class F>
void rows(int64_t B, int64_t H, F&& fn) {
  parallel_for(0, B, std::max<int64_t>(1, kGrain / std::max<int64_t>(H, 1)), fn);
}

template <class F>
void step_rows(int64_t B, int64_t H, F&& fn) {
  parallel_for(0, B, std::max<int64_t>(1, kStepGrain / std::max<int64_t>(H, 1)), fn);
}

}  // namespace

void lstm_cell(const Tensor& gates, const Tensor& c, const Tensor& h_out, const Tensor& c_out) {
  const int64_t B = c.shape()[0], H = c.shape()[1];
  dispatch_only<bfloat16, float, double>(c.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* gp = cptr<T>(gates);
    const T* cp = cptr<T>(c);
    T* hp = mptr<T>(h_out);
    T* cn = mptr<T>(c_out);
    rows(B, H, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        const T* g = gp + b * 4 * H;
        const T* cr = cp + b * H;
        T* hr = hp + b * H;
        T* cnr = cn + b * H;
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) {
          A i = math::sigmoid(A(g[j])), f = math::sigmoid(A(g[H + j]));
          A gg = math::tanh(A(g[2 * H + j])), o = math::sigmoid(A(g[3 * H + j]));
          A cv = f * A(cr[j]) + i * gg;
          cnr[j] = T(cv);
          hr[j] = T(o * math::tanh(cv));
        }
      }
    });
  });
}

void lstm_cell_backward(const Tensor& gates, const Tensor& c, const Tensor& c_new, const Tensor& gh,
                        const Tensor& gc, const Tensor& g_gates, const Tensor& g_c) {
  const int64_t B = c.shape()[0], H = c.shape()[1];
  dispatch_only<bfloat16, float, double>(c.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T *gp = cptr<T>(gates), *cp = cptr<T>(c), *cnp = cptr<T>(c_new), *ghp = cptr<T>(gh), *gcp = cptr<T>(gc);
    T* ggp = mptr<T>(g_gates);
    T* gcprev = mptr<T>(g_c);
    rows(B, H, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        const T* g = gp + b * 4 * H;
        const int64_t r = b * H;
        if (ggp) {
          T* out = ggp + b * 4 * H;
#pragma omp simd
          for (int64_t j = 0; j < H; ++j) {
            A i = math::sigmoid(A(g[j])), f = math::sigmoid(A(g[H + j]));
            A gg = math::tanh(A(g[2 * H + j])), o = math::sigmoid(A(g[3 * H + j]));
            A tc = math::tanh(A(cnp[r + j]));
            A dh = A(ghp[r + j]);
            A dc = A(gcp[r + j]) + dh * o * (A(1) - tc * tc);
            out[j] = T(dc * gg * i * (A(1) - i));
            out[H + j] = T(dc * A(cp[r + j]) * f * (A(1) - f));
            out[2 * H + j] = T(dc * i * (A(1) - gg * gg));
            out[3 * H + j] = T(dh * tc * o * (A(1) - o));
            if (gcprev) gcprev[r + j] = T(dc * f);
          }
        } else {
#pragma omp simd
          for (int64_t j = 0; j < H; ++j) {
            A f = math::sigmoid(A(g[H + j])), o = math::sigmoid(A(g[3 * H + j]));
            A tc = math::tanh(A(cnp[r + j]));
            A dc = A(gcp[r + j]) + A(ghp[r + j]) * o * (A(1) - tc * tc);
            gcprev[r + j] = T(dc * f);
          }
        }
      }
    });
  });
}

void lstm_cell_train(const Tensor& gates, const Tensor& c, const Tensor& h_out, const Tensor& c_out,
                     const Tensor& tc_out) {
  const int64_t B = c.shape()[0], H = c.shape()[1];
  dispatch_only<bfloat16, float, double>(c.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    T* gp = mptr<T>(gates);
    const T* cp = cptr<T>(c);
    T *hp = mptr<T>(h_out), *cn = mptr<T>(c_out), *tp = mptr<T>(tc_out);
    step_rows(B, H, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        T* g = gp + b * 4 * H;
        const int64_t r = b * H;
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) {
          A i = math::sigmoid(A(g[j])), f = math::sigmoid(A(g[H + j]));
          A gg = math::tanh(A(g[2 * H + j])), o = math::sigmoid(A(g[3 * H + j]));
          A cv = f * A(cp[r + j]) + i * gg;
          A tc = math::tanh(cv);
          g[j] = T(i);
          g[H + j] = T(f);
          g[2 * H + j] = T(gg);
          g[3 * H + j] = T(o);
          cn[r + j] = T(cv);
          tp[r + j] = T(tc);
          hp[r + j] = T(o * tc);
        }
      }
    });
  });
}

void lstm_cell_backward_acts(const Tensor& acts, const Tensor& c, const Tensor& tc, const Tensor& dh,
                             const Tensor& dc, const Tensor& g_gates) {
  const int64_t B = c.shape()[0], H = c.shape()[1];
  dispatch_only<bfloat16, float, double>(c.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T *ap = cptr<T>(acts), *cp = cptr<T>(c), *tp = cptr<T>(tc), *dhp = cptr<T>(dh);
    T *dcp = mptr<T>(dc), *ggp = mptr<T>(g_gates);
    // No transcendental left: a [32, 256] step takes ~3 us on one thread,
    // less than waking a second one costs, so kGrain as for the others.
    rows(B, H, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        const T* a = ap + b * 4 * H;
        T* out = ggp + b * 4 * H;
        const int64_t r = b * H;
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) {
          A i = A(a[j]), f = A(a[H + j]), gg = A(a[2 * H + j]), o = A(a[3 * H + j]);
          A t = A(tp[r + j]), d = A(dhp[r + j]);
          A dcv = A(dcp[r + j]) + d * o * (A(1) - t * t);  // read before dc is overwritten below
          out[j] = T(dcv * gg * i * (A(1) - i));
          out[H + j] = T(dcv * A(cp[r + j]) * f * (A(1) - f));
          out[2 * H + j] = T(dcv * i * (A(1) - gg * gg));
          out[3 * H + j] = T(d * t * o * (A(1) - o));
          dcp[r + j] = T(dcv * f);
        }
      }
    });
  });
}

void gru_cell(const Tensor& gi, const Tensor& gh, const Tensor& h, const Tensor& h_out) {
  const int64_t B = h.shape()[0], H = h.shape()[1];
  dispatch_only<bfloat16, float, double>(h.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T *ip = cptr<T>(gi), *rp = cptr<T>(gh), *hp = cptr<T>(h);
    T* op = mptr<T>(h_out);
    rows(B, H, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        const T* x = ip + b * 3 * H;
        const T* y = rp + b * 3 * H;
        const T* hr = hp + b * H;
        T* out = op + b * H;
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) {
          A r = math::sigmoid(A(x[j]) + A(y[j]));
          A z = math::sigmoid(A(x[H + j]) + A(y[H + j]));
          A n = math::tanh(A(x[2 * H + j]) + r * A(y[2 * H + j]));
          out[j] = T((A(1) - z) * n + z * A(hr[j]));
        }
      }
    });
  });
}

void gru_cell_backward(const Tensor& gi, const Tensor& gh, const Tensor& h, const Tensor& g, const Tensor& g_gi,
                       const Tensor& g_gh, const Tensor& g_h) {
  const int64_t B = h.shape()[0], H = h.shape()[1];
  dispatch_only<bfloat16, float, double>(h.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T *ip = cptr<T>(gi), *rp = cptr<T>(gh), *hp = cptr<T>(h), *gp = cptr<T>(g);
    T *gip = mptr<T>(g_gi), *ghp = mptr<T>(g_gh), *ghh = mptr<T>(g_h);
    rows(B, H, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        const T* x = ip + b * 3 * H;
        const T* y = rp + b * 3 * H;
        const int64_t r0 = b * H, q0 = b * 3 * H;
        if (gip || ghp) {
#pragma omp simd
          for (int64_t j = 0; j < H; ++j) {
            A r = math::sigmoid(A(x[j]) + A(y[j]));
            A z = math::sigmoid(A(x[H + j]) + A(y[H + j]));
            A n = math::tanh(A(x[2 * H + j]) + r * A(y[2 * H + j]));
            A gv = A(gp[r0 + j]);
            A dn = gv * (A(1) - z) * (A(1) - n * n);
            A dr = dn * A(y[2 * H + j]) * r * (A(1) - r);
            A dz = gv * (A(hp[r0 + j]) - n) * z * (A(1) - z);
            if (gip) {
              gip[q0 + j] = T(dr);
              gip[q0 + H + j] = T(dz);
              gip[q0 + 2 * H + j] = T(dn);
            }
            if (ghp) {
              ghp[q0 + j] = T(dr);
              ghp[q0 + H + j] = T(dz);
              ghp[q0 + 2 * H + j] = T(dn * r);
            }
            if (ghh) ghh[r0 + j] = T(gv * z);
          }
        } else if (ghh) {
#pragma omp simd
          for (int64_t j = 0; j < H; ++j) ghh[r0 + j] = T(A(gp[r0 + j]) * math::sigmoid(A(x[H + j]) + A(y[H + j])));
        }
      }
    });
  });
}

// ---- plain references: f64, std:: functions, one element at a time ----

}  // namespace kiln::backend::cpu::KILN_ISA_NS
