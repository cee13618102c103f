// The plain reference of the CPU resize (nearest, bilinear) kernels (resize.cpp): obvious loops the
// fast kernels are tested against.
#include "src/backend/cpu/copy/resize.h"

#include <cstring>
#include <type_traits>

#include "kiln/core/parallel.h"
#include "src/backend/cpu/dispatch.h"

namespace kiln::backend::cpu {

namespace ref {

namespace {

// The taps and weights of output o along one axis, from the formulas.
template <class A>
void taps(bool linear, int64_t o, int64_t in, int64_t out, bool align, double scale, int64_t i[2], double l[2]) {
  if (!linear) {
    i[0] = i[1] = nearest_source(o, in, out, scale), l[0] = 1, l[1] = 0;
    return;
  }
  A l0, l1;
  linear_source<A>(o, in, out, align, scale, i[0], i[1], l0, l1);
  l[0] = double(l0), l[1] = double(l1);
}

}  // namespace

void interpolate(const Tensor& x_in, const Tensor& out, bool linear, bool align, double scale_h, double scale_w) {
  Tensor x = x_in.contiguous();
  const int64_t N = x.shape()[0], H = x.shape()[1], W = x.shape()[2], OH = out.shape()[1], OW = out.shape()[2];
  dispatch_only<bfloat16, float, double>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          int64_t ih[2], iw[2];
          double lh[2], lw[2];
          taps<A>(linear, oh, H, OH, align, scale_h, ih, lh);
          taps<A>(linear, ow, W, OW, align, scale_w, iw, lw);
          double s = 0;
          for (int a = 0; a < 2; ++a)
            for (int b = 0; b < 2; ++b) s += lh[a] * lw[b] * double(xp[(n * H + ih[a]) * W + iw[b]]);
          op[(n * OH + oh) * OW + ow] = T(s);
        }
  });
}

void interpolate_backward(const Tensor& grad_out, const Tensor& grad_in, bool linear, bool align, double scale_h,
                          double scale_w) {
  Tensor go = grad_out.contiguous();
  const int64_t N = grad_in.shape()[0], H = grad_in.shape()[1], W = grad_in.shape()[2];
  const int64_t OH = go.shape()[1], OW = go.shape()[2];
  dispatch_only<bfloat16, float, double>(go.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* gp = static_cast<const T*>(go.data_ptr());
    T* xp = static_cast<T*>(grad_in.data_ptr());
    std::vector<double> acc(size_t(N * H * W), 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          int64_t ih[2], iw[2];
          double lh[2], lw[2];
          taps<A>(linear, oh, H, OH, align, scale_h, ih, lh);
          taps<A>(linear, ow, W, OW, align, scale_w, iw, lw);
          const double v = double(gp[(n * OH + oh) * OW + ow]);
          for (int a = 0; a < 2; ++a)
            for (int b = 0; b < 2; ++b) acc[size_t((n * H + ih[a]) * W + iw[b])] += lh[a] * lw[b] * v;
        }
    for (size_t i = 0; i < acc.size(); ++i) xp[i] = T(acc[i]);
  });
}

}  // namespace ref

}  // namespace kiln::backend::cpu
