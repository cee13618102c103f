// The plain reference of the CPU max and average pooling kernels (pool.cpp): obvious loops the
// fast kernels are tested against.
#include "src/backend/cpu/nn/pool.h"

#include <bit>
#include <cmath>
#include <type_traits>
#include <limits>

#include "kiln/core/parallel.h"
#include "src/backend/cpu/dispatch.h"

namespace kiln::backend::cpu {

namespace ref {

void max_pool2d(const MaxPoolGeom& g, const Tensor& x_in, const Tensor& out, const Tensor& indices) {
  Tensor x = x_in.contiguous();
  dispatch_only<bfloat16, float, double>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    int64_t* ip = static_cast<int64_t*>(indices.data_ptr());
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t oh = 0; oh < g.OH; ++oh)
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          double best = 0;
          int64_t arg = -1;
          for (int64_t kh = 0; kh < g.kh; ++kh)
            for (int64_t kw = 0; kw < g.kw; ++kw) {
              const int64_t ih = oh * g.sh - g.ph + kh * g.dh, iw = ow * g.sw - g.pw + kw * g.dw;
              if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
              const double v = double(xp[(n * g.H + ih) * g.W + iw]);
              if (arg < 0 || v > best || std::isnan(v)) best = v, arg = ih * g.W + iw;
            }
          op[(n * g.OH + oh) * g.OW + ow] = T(best);
          ip[(n * g.OH + oh) * g.OW + ow] = arg;
        }
  });
}

void avg_pool2d(const Tensor& x_in, const Tensor& out, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
                int64_t pw, bool count_include_pad) {
  Tensor x = x_in.contiguous();
  const int64_t N = x.shape()[0], H = x.shape()[1], W = x.shape()[2], OH = out.shape()[1], OW = out.shape()[2];
  dispatch_only<bfloat16, float, double>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          // The window in padded coordinates, cut at the far padding edge.
          int64_t hs = oh * sh - ph, ws = ow * sw - pw;
          int64_t he = std::min(hs + kh, H + ph), we = std::min(ws + kw, W + pw);
          const int64_t padded = (he - hs) * (we - ws);
          hs = std::max<int64_t>(hs, 0), ws = std::max<int64_t>(ws, 0);
          he = std::min(he, H), we = std::min(we, W);
          double s = 0;
          for (int64_t h = hs; h < he; ++h)
            for (int64_t c = ws; c < we; ++c) s += double(xp[(n * H + h) * W + c]);
          op[(n * OH + oh) * OW + ow] = T(s / double(count_include_pad ? padded : (he - hs) * (we - ws)));
        }
  });
}

void adaptive_avg_pool2d(const Tensor& x_in, const Tensor& out) {
  Tensor x = x_in.contiguous();
  const int64_t N = x.shape()[0], H = x.shape()[1], W = x.shape()[2], OH = out.shape()[1], OW = out.shape()[2];
  dispatch_only<bfloat16, float, double>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t hs = (oh * H) / OH, he = ((oh + 1) * H + OH - 1) / OH;
          const int64_t ws = (ow * W) / OW, we = ((ow + 1) * W + OW - 1) / OW;
          double s = 0;
          for (int64_t h = hs; h < he; ++h)
            for (int64_t c = ws; c < we; ++c) s += double(xp[(n * H + h) * W + c]);
          op[(n * OH + oh) * OW + ow] = T(s / double((he - hs) * (we - ws)));
        }
  });
}

}  // namespace ref

}  // namespace kiln::backend::cpu
