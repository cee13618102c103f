// The plain convolution loops (NOTE [Conv geometry] in conv.h): one output
// element at a time, bounds-checked reads, f64 accumulation. They are the
// oracle for the oneDNN path and the f64 kernel gradcheck runs on.
#include "src/backend/cpu/linalg/conv.h"

#include "kiln/core/parallel.h"
#include "src/backend/cpu/dispatch.h"

namespace kiln::backend::cpu::ref {

namespace {

template <class T>
const T* cptr(const Tensor& t) { return static_cast<const T*>(t.data_ptr()); }

}  // namespace

void conv_forward(const ConvGeom& g, const Tensor& large_in, const Tensor& w_in, const Tensor* bias,
                  const Tensor& small) {
  Tensor large = large_in.contiguous(), w = w_in.contiguous();
  Tensor b = bias ? bias->contiguous() : Tensor();
  const int64_t Cg = g.C / g.groups, Og = g.O / g.groups;
  dispatch_only<bfloat16, float, double>(small.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *x = cptr<T>(large), *k = cptr<T>(w), *bp = b.defined() ? cptr<T>(b) : nullptr;
    T* y = static_cast<T*>(small.data_ptr());
    // One (b, o) plane per task: planes are independent.
    parallel_for(0, g.B * g.O, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t bo = lo; bo < hi; ++bo) {
        const int64_t n = bo / g.O, o = bo % g.O, c0 = (o / Og) * Cg;
        for (int64_t oh = 0; oh < g.OH; ++oh)
          for (int64_t ow = 0; ow < g.OW; ++ow) {
            double acc = bp ? double(bp[o]) : 0.0;
            for (int64_t c = 0; c < Cg; ++c)
              for (int64_t kh = 0; kh < g.KH; ++kh) {
                const int64_t ih = oh * g.sh + kh * g.dh - g.pt;
                if (ih < 0 || ih >= g.H) continue;
                for (int64_t kw = 0; kw < g.KW; ++kw) {
                  const int64_t iw = ow * g.sw + kw * g.dw - g.pl;
                  if (iw < 0 || iw >= g.W) continue;
                  acc += double(x[((n * g.C + c0 + c) * g.H + ih) * g.W + iw]) *
                         double(k[((o * Cg + c) * g.KH + kh) * g.KW + kw]);
                }
              }
            y[((n * g.O + o) * g.OH + oh) * g.OW + ow] = T(acc);
          }
      }
    });
  });
}

void conv_backward_data(const ConvGeom& g, const Tensor& small_in, const Tensor& w_in, const Tensor* bias,
                        const Tensor& large) {
  Tensor small = small_in.contiguous(), w = w_in.contiguous();
  Tensor b = bias ? bias->contiguous() : Tensor();
  const int64_t Cg = g.C / g.groups, Og = g.O / g.groups;
  dispatch_only<bfloat16, float, double>(large.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *y = cptr<T>(small), *k = cptr<T>(w), *bp = b.defined() ? cptr<T>(b) : nullptr;
    T* x = static_cast<T*>(large.data_ptr());
    parallel_for(0, g.B * g.C, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t bc = lo; bc < hi; ++bc) {
        const int64_t n = bc / g.C, c = bc % g.C, o0 = (c / Cg) * Og, cc = c % Cg;
        for (int64_t ih = 0; ih < g.H; ++ih)
          for (int64_t iw = 0; iw < g.W; ++iw) {
            // Every (o, kh, kw) whose window reads large[n, c, ih, iw].
            double acc = bp ? double(bp[c]) : 0.0;
            for (int64_t o = o0; o < o0 + Og; ++o)
              for (int64_t kh = 0; kh < g.KH; ++kh) {
                const int64_t th = ih + g.pt - kh * g.dh;
                if (th < 0 || th % g.sh != 0 || th / g.sh >= g.OH) continue;
                for (int64_t kw = 0; kw < g.KW; ++kw) {
                  const int64_t tw = iw + g.pl - kw * g.dw;
                  if (tw < 0 || tw % g.sw != 0 || tw / g.sw >= g.OW) continue;
                  acc += double(y[((n * g.O + o) * g.OH + th / g.sh) * g.OW + tw / g.sw]) *
                         double(k[((o * Cg + cc) * g.KH + kh) * g.KW + kw]);
                }
              }
            x[((n * g.C + c) * g.H + ih) * g.W + iw] = T(acc);
          }
      }
    });
  });
}

void conv_backward_weights(const ConvGeom& g, const Tensor& large_in, const Tensor& small_in, const Tensor& gw,
                           const Tensor* gb) {
  Tensor large = large_in.contiguous(), small = small_in.contiguous();
  const int64_t Cg = g.C / g.groups, Og = g.O / g.groups;
  dispatch_only<bfloat16, float, double>(gw.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *x = cptr<T>(large), *y = cptr<T>(small);
    T* k = static_cast<T*>(gw.data_ptr());
    parallel_for(0, g.O, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        const int64_t c0 = (o / Og) * Cg;
        for (int64_t c = 0; c < Cg; ++c)
          for (int64_t kh = 0; kh < g.KH; ++kh)
            for (int64_t kw = 0; kw < g.KW; ++kw) {
              double acc = 0;
              for (int64_t n = 0; n < g.B; ++n)
                for (int64_t oh = 0; oh < g.OH; ++oh) {
                  const int64_t ih = oh * g.sh + kh * g.dh - g.pt;
                  if (ih < 0 || ih >= g.H) continue;
                  for (int64_t ow = 0; ow < g.OW; ++ow) {
                    const int64_t iw = ow * g.sw + kw * g.dw - g.pl;
                    if (iw < 0 || iw >= g.W) continue;
                    acc += double(y[((n * g.O + o) * g.OH + oh) * g.OW + ow]) *
                           double(x[((n * g.C + c0 + c) * g.H + ih) * g.W + iw]);
                  }
                }
              k[((o * Cg + c) * g.KH + kh) * g.KW + kw] = T(acc);
            }
        if (gb) {
          double acc = 0;
          for (int64_t n = 0; n < g.B; ++n)
            for (int64_t p = 0; p < g.OH * g.OW; ++p) acc += double(y[(n * g.O + o) * g.OH * g.OW + p]);
          static_cast<T*>(gb->data_ptr())[o] = T(acc);
        }
      }
    });
  });
}

}  // namespace kiln::backend::cpu::ref
