// CPU LSTM and GRU cells: the reference kernels (plain loops), the oracle
// for the fast ones in isa/rnn.cpp.
#include "src/backend/cpu/nn/rnn.h"

#include <algorithm>
#include <cmath>

#include "kiln/core/parallel.h"
#include "src/backend/cpu/dispatch.h"
#include "src/backend/cpu/elementwise/elementwise_math.h"

namespace kiln::backend::cpu {

namespace ref {

namespace {

using rnn_detail::cptr;
using rnn_detail::mptr;

double sig(double v) { return 1.0 / (1.0 + std::exp(-v)); }
template <class F>
void with_t(DType dt, F&& fn) {
  dispatch_only<bfloat16, float, double>(dt, [&](auto tag) { fn(tag); });
}

}  // namespace

void lstm_cell(const Tensor& gates, const Tensor& c, const Tensor& h_out, const Tensor& c_out) {
  const int64_t B = c.shape()[0], H = c.shape()[1];
  with_t(c.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *g = cptr<T>(gates), *cp = cptr<T>(c);
    T *hp = mptr<T>(h_out), *cn = mptr<T>(c_out);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < H; ++j) {
        const T* gr = g + b * 4 * H;
        double i = sig(double(gr[j])), f = sig(double(gr[H + j])), gg = std::tanh(double(gr[2 * H + j])),
               o = sig(double(gr[3 * H + j]));
        double cv = f * double(cp[b * H + j]) + i * gg;
        cn[b * H + j] = T(cv);
        hp[b * H + j] = T(o * std::tanh(cv));
      }
  });
}

void lstm_cell_backward(const Tensor& gates, const Tensor& c, const Tensor& c_new, const Tensor& gh,
                        const Tensor& gc, const Tensor& g_gates, const Tensor& g_c) {
  const int64_t B = c.shape()[0], H = c.shape()[1];
  with_t(c.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *g = cptr<T>(gates), *cp = cptr<T>(c), *cnp = cptr<T>(c_new), *dhp = cptr<T>(gh), *dcp = cptr<T>(gc);
    T *gg_out = mptr<T>(g_gates), *gc_out = mptr<T>(g_c);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < H; ++j) {
        const T* gr = g + b * 4 * H;
        const int64_t k = b * H + j;
        double i = sig(double(gr[j])), f = sig(double(gr[H + j])), gg = std::tanh(double(gr[2 * H + j])),
               o = sig(double(gr[3 * H + j]));
        double tc = std::tanh(double(cnp[k])), dh = double(dhp[k]);
        double dc = double(dcp[k]) + dh * o * (1 - tc * tc);
        if (gg_out) {
          T* out = gg_out + b * 4 * H;
          out[j] = T(dc * gg * i * (1 - i));
          out[H + j] = T(dc * double(cp[k]) * f * (1 - f));
          out[2 * H + j] = T(dc * i * (1 - gg * gg));
          out[3 * H + j] = T(dh * tc * o * (1 - o));
        }
        if (gc_out) gc_out[k] = T(dc * f);
      }
  });
}

void gru_cell(const Tensor& gi, const Tensor& gh, const Tensor& h, const Tensor& h_out) {
  const int64_t B = h.shape()[0], H = h.shape()[1];
  with_t(h.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *x = cptr<T>(gi), *y = cptr<T>(gh), *hp = cptr<T>(h);
    T* out = mptr<T>(h_out);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < H; ++j) {
        const int64_t q = b * 3 * H + j;
        double r = sig(double(x[q]) + double(y[q]));
        double z = sig(double(x[q + H]) + double(y[q + H]));
        double n = std::tanh(double(x[q + 2 * H]) + r * double(y[q + 2 * H]));
        out[b * H + j] = T((1 - z) * n + z * double(hp[b * H + j]));
      }
  });
}

void gru_cell_backward(const Tensor& gi, const Tensor& gh, const Tensor& h, const Tensor& g, const Tensor& g_gi,
                       const Tensor& g_gh, const Tensor& g_h) {
  const int64_t B = h.shape()[0], H = h.shape()[1];
  with_t(h.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *x = cptr<T>(gi), *y = cptr<T>(gh), *hp = cptr<T>(h), *gp = cptr<T>(g);
    T *gip = mptr<T>(g_gi), *ghp = mptr<T>(g_gh), *ghh = mptr<T>(g_h);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < H; ++j) {
        const int64_t q = b * 3 * H + j, k = b * H + j;
        double r = sig(double(x[q]) + double(y[q]));
        double z = sig(double(x[q + H]) + double(y[q + H]));
        double n = std::tanh(double(x[q + 2 * H]) + r * double(y[q + 2 * H]));
        double gv = double(gp[k]);
        double dn = gv * (1 - z) * (1 - n * n);
        double dr = dn * double(y[q + 2 * H]) * r * (1 - r);
        double dz = gv * (double(hp[k]) - n) * z * (1 - z);
        if (gip) {
          gip[q] = T(dr);
          gip[q + H] = T(dz);
          gip[q + 2 * H] = T(dn);
        }
        if (ghp) {
          ghp[q] = T(dr);
          ghp[q + H] = T(dz);
          ghp[q + 2 * H] = T(dn * r);
        }
        if (ghh) ghh[k] = T(gv * z);
      }
  });
}

}  // namespace ref

}  // namespace kiln::backend::cpu
