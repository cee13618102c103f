// CPU pooling kernels over N independent planes [N, H, W] (N = B * C):
// max pooling with argmax indices and its gradient scatter (2x2 stride-2
// windows: one-byte taps, NOTE [2x2 max pooling]), and average
// pooling (plain, count_include_pad, adaptive) through per-dim window
// tables. The plain ref:: versions recompute every window from PyTorch's
// formulas.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::backend::cpu {

/// Window k of output row oh reads input row oh * sh - ph + k * dh (taps
/// outside [0, H) are skipped); likewise for columns.
struct MaxPoolGeom {
  int64_t N = 0, H = 0, W = 0, OH = 0, OW = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};

/// out [N, OH, OW] (x's dtype) and indices [N, OH, OW] (i64, h * W + w in
/// the plane) of the first largest element per window; a NaN wins. x is
/// any floating layout of N * H * W elements (made contiguous); every window
/// holds at least one input element.
void max_pool2d(const MaxPoolGeom& g, const Tensor& x, const Tensor& out, const Tensor& indices);
/// grad_in [N, H, W] = 0, then grad_in[n, indices[n, i]] += grad_out[n, i].
void max_pool2d_backward(const MaxPoolGeom& g, const Tensor& grad_out, const Tensor& indices,
                         const Tensor& grad_in);

/// NOTE [2x2 max pooling]: the CNN case -- 2x2 windows, stride 2, no padding
/// or dilation -- has its own kernels. Windows do not overlap and lie inside
/// the plane, so each reads two contiguous input rows, and instead of i64
/// plane indices it records the winning tap as one byte (0 top-left,
/// 1 top-right, 2 bottom-left, 3 bottom-right): 8x less index traffic, and
/// the backward writes every input element once (no zero fill + scatter).
/// Same tie and NaN rules as max_pool2d.
bool is_max_pool_2x2(const MaxPoolGeom& g);
/// out [N, OH, OW] (x's dtype) and taps [N, OH, OW] (u8); x any floating layout.
void max_pool2d_2x2(const MaxPoolGeom& g, const Tensor& x, const Tensor& out, const Tensor& taps);
/// grad_in [N, H, W]: grad_out at each window's winning tap, zero elsewhere
/// (rows and columns no window reads included).
void max_pool2d_2x2_backward(const MaxPoolGeom& g, const Tensor& grad_out, const Tensor& taps,
                             const Tensor& grad_in);
/// indices [N, OH, OW] (i64, h * W + w in the plane), as max_pool2d gives, from taps.
void max_pool2d_2x2_indices(const MaxPoolGeom& g, const Tensor& taps, const Tensor& indices);

/// Average windows, separable: output (oh, ow) is the sum of rows
/// [h0[oh], h1[oh]) x columns [w0[ow], w1[ow]) of its plane divided by
/// hn[oh] * wn[ow] (the window size, padding counted or not).
struct AvgWindows {
  int64_t N = 0, H = 0, W = 0;
  std::vector<int64_t> h0, h1, hn, w0, w1, wn;  // each OH (h*) or OW (w*) long
  int64_t OH() const { return int64_t(h0.size()); }
  int64_t OW() const { return int64_t(w0.size()); }
};

/// out [N, OH, OW] = window means of x [N, H, W].
void avg_pool2d(const AvgWindows& a, const Tensor& x, const Tensor& out);
/// grad_in [N, H, W]: each grad_out element spread evenly over its window.
void avg_pool2d_backward(const AvgWindows& a, const Tensor& grad_out, const Tensor& grad_in);

namespace ref {
void max_pool2d(const MaxPoolGeom& g, const Tensor& x, const Tensor& out, const Tensor& indices);
/// torch's avg_pool2d on planes [N, H, W] -> out [N, OH, OW] (OH, OW from out).
void avg_pool2d(const Tensor& x, const Tensor& out, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
                int64_t pw, bool count_include_pad);
/// torch's adaptive_avg_pool2d on planes [N, H, W] -> out [N, OH, OW].
void adaptive_avg_pool2d(const Tensor& x, const Tensor& out);
}  // namespace ref

}  // namespace kiln::backend::cpu
