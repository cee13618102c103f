// conv1d/conv2d/conv_transpose1d/conv_transpose2d: argument checks, output
// sizes (PyTorch's rules), and three differentiable primitives that are each
// other's vjps (NOTE [Conv geometry] in src/backend/cpu/linalg/conv.h):
//   conv_fwd:      small = conv(large, w)          (conv2d)
//   conv_bwd_data: large = conv^T(small, w)        (conv_transpose2d)
//   conv_bwd_w:    gw = corr(large, small), gb = sum(small)
// so grad-of-grad (create_graph) works to any order.
#include "kiln/ops/conv.h"
#include "kiln/ops/conv_algorithm.h"

#include <algorithm>
#include <array>
#include <tuple>

#include "kiln/ops/binary.h"
#include "kiln/ops/record.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "src/backend/backend.h"
#include "src/backend/cpu/linalg/conv.h"
#include "src/ops/checks.h"

namespace kiln {

namespace {

using backend::cpu::ConvGeom;

Tensor conv_fwd(const char* op, const ConvGeom& g, const Tensor& large, const Tensor& w, const Tensor& bias);
Tensor conv_bwd_data(const char* op, const ConvGeom& g, const Tensor& small, const Tensor& w, const Tensor& bias);
std::pair<Tensor, Tensor> conv_bwd_w(const char* op, const ConvGeom& g, const Tensor& large, const Tensor& small,
                                     bool with_bias);

// The bias gradient of a [B, X, H, W] output: sum over batch and space.
Tensor bias_grad(const Tensor& g) { return sum(g, {0, 2, 3}); }

Tensor conv_fwd(const char* op, const ConvGeom& g, const Tensor& large, const Tensor& w, const Tensor& bias) {
  Tensor small = Tensor::empty({g.B, g.O, g.OH, g.OW}, large.dtype(), large.device());
  KILN_LAUNCH(op, backend::cpu::conv_forward(g, large, w, bias.defined() ? &bias : nullptr, small));
  if (needs_grad(large, w, bias)) {
    record(op, {large, w, bias}, {small}, {needs_grad(w) ? large : Tensor(), needs_grad(large) ? w : Tensor()},
           [op, g](const VjpArgs& a) -> Grads {
             // One contiguous copy for both kernels (a permuted or broadcast
             // gradient would be copied by each), so that backward-weights
             // also finds the copy backward-data reordered (NOTE [Reordered
             // inputs] in src/backend/cpu/linalg/conv.cpp).
             const Tensor gy = a.grad().contiguous();
             Tensor gl, gw, gb;
             if (a.needs(0)) gl = conv_bwd_data(op, g, gy, a.saved[1], {});
             if (a.needs(1)) std::tie(gw, gb) = conv_bwd_w(op, g, a.saved[0], gy, a.needs(2));
             else if (a.needs(2)) gb = bias_grad(gy);
             return {gl, gw, gb};
           });
  }
  return small;
}

Tensor conv_bwd_data(const char* op, const ConvGeom& g, const Tensor& small, const Tensor& w, const Tensor& bias) {
  Tensor large = Tensor::empty({g.B, g.C, g.H, g.W}, small.dtype(), small.device());
  KILN_LAUNCH(op, backend::cpu::conv_backward_data(g, small, w, bias.defined() ? &bias : nullptr, large));
  if (needs_grad(small, w, bias)) {
    record(op, {small, w, bias}, {large}, {needs_grad(w) ? small : Tensor(), needs_grad(small) ? w : Tensor()},
           [op, g](const VjpArgs& a) -> Grads {
             const Tensor gx = a.grad().contiguous();  // [B, C, H, W], one copy for both kernels (as above)
             Tensor gs, gw, gb;
             if (a.needs(0)) gs = conv_fwd(op, g, gx, a.saved[1], {});
             if (a.needs(1)) gw = conv_bwd_w(op, g, gx, a.saved[0], false).first;
             if (a.needs(2)) gb = bias_grad(gx);
             return {gs, gw, gb};
           });
  }
  return large;
}

std::pair<Tensor, Tensor> conv_bwd_w(const char* op, const ConvGeom& g, const Tensor& large, const Tensor& small,
                                     bool with_bias) {
  const DType dt = large.dtype();
  Tensor gw = Tensor::empty({g.O, g.C / g.groups, g.KH, g.KW}, dt, large.device());
  Tensor gb = with_bias ? Tensor::empty({g.O}, dt, large.device()) : Tensor();
  KILN_LAUNCH(op, backend::cpu::conv_backward_weights(g, large, small, gw, with_bias ? &gb : nullptr));
  if (needs_grad(large, small)) {
    // Bilinear in (large, small): d/dlarge = conv^T(small, Gw);
    // d/dsmall = conv(large, Gw) + Gb broadcast over batch and space.
    auto vjp = [op, g](const VjpArgs& a) -> Grads {
      const Tensor& Gw = a.grads[0];
      Tensor gl, gs;
      if (a.needs(0)) gl = conv_bwd_data(op, g, a.saved[1], Gw, {});
      if (a.needs(1)) {
        gs = conv_fwd(op, g, a.saved[0], Gw, {});
        if (a.grads.size() > 1) gs = add(gs, reshape(a.grads[1], {1, g.O, 1, 1}));
      }
      return {gl, gs};
    };
    if (with_bias) record(op, {large, small}, {gw, gb}, {large, small}, vjp);
    else record(op, {large, small}, {gw}, {large, small}, vjp);
  }
  return {gw, gb};
}

// ---------------------------------------------------------------------------
// Argument checks shared by the four public ops. Shapes in messages are the
// caller's (1-D ops show 1-D shapes); `nsp` is 1 or 2 spatial dims.
// ---------------------------------------------------------------------------

struct Spatial {
  std::array<int64_t, 2> v{0, 0};
  int64_t& operator[](size_t i) { return v[i]; }
  int64_t operator[](size_t i) const { return v[i]; }
};

std::string dims_str(const Spatial& s, int nsp) {
  return nsp == 1 ? fmt::format("{}", s[1]) : fmt::format("({}, {})", s[0], s[1]);
}

void check_common(const char* op, const Tensor& x, const Tensor& w, const Tensor& bias, int nsp, int64_t groups,
                  const Spatial& stride, const Spatial& dilation) {
  check_defined(op, x);
  check_defined(op, w, "weight");
  backend::device_of(op, x, w, bias);
  KILN_CHECK(x.dim() == nsp + 1 || x.dim() == nsp + 2, op,
             "input {} must be {}-D (batched [B, C, {}]) or {}-D (unbatched), got {}-D", to_string(x.shape()),
             nsp + 2, nsp == 1 ? "L" : "H, W", nsp + 1, x.dim());
  KILN_CHECK(w.dim() == nsp + 2, op, "weight {} must be {}-D, got {}-D", to_string(w.shape()), nsp + 2, w.dim());
  KILN_CHECK(is_floating(x.dtype()), op, "expects a floating input, got {} {}", name(x.dtype()),
             to_string(x.shape()));
  KILN_CHECK(w.dtype() == x.dtype(), op, "dtype mismatch: input {} is {} and weight {} is {}", to_string(x.shape()),
             name(x.dtype()), to_string(w.shape()), name(w.dtype()));
  if (bias.defined())
    KILN_CHECK(bias.dtype() == x.dtype(), op, "dtype mismatch: bias {} is {} and input {} is {}",
               to_string(bias.shape()), name(bias.dtype()), to_string(x.shape()), name(x.dtype()));
  KILN_CHECK(groups > 0, op, "groups must be positive, got {}", groups);
  for (int i = 2 - nsp; i < 2; ++i) {
    KILN_CHECK(stride[size_t(i)] > 0, op, "stride must be positive, got {}", dims_str(stride, nsp));
    KILN_CHECK(dilation[size_t(i)] > 0, op, "dilation must be positive, got {}", dims_str(dilation, nsp));
  }
}

void check_bias(const char* op, const Tensor& bias, const Tensor& w, int64_t channels) {
  if (!bias.defined()) return;
  KILN_CHECK(bias.dim() == 1 && bias.shape()[0] == channels, op,
             "bias {} does not match weight {} (expected [{}], one per output channel)", to_string(bias.shape()),
             to_string(w.shape()), channels);
}

// x and w lifted to 4-D (unit batch for unbatched input, unit H for 1-D).
Tensor lift(const Tensor& t, int nsp, bool add_batch) {
  Tensor r = add_batch ? unsqueeze(t, 0) : t;
  return nsp == 1 ? unsqueeze(r, -2) : r;
}

Tensor lower(const Tensor& t, int nsp, bool drop_batch) {
  Tensor r = nsp == 1 ? squeeze(t, -2) : t;
  return drop_batch ? squeeze(r, 0) : r;
}

Tensor conv_any(const char* op, int nsp, const Tensor& x, const Tensor& w, const Tensor& bias, Spatial stride,
                const ConvPadding& padding, Spatial dilation, int64_t groups) {
  check_common(op, x, w, bias, nsp, groups, stride, dilation);
  const bool batched = x.dim() == nsp + 2;
  const int64_t C = x.shape()[batched ? 1 : 0], O = w.shape()[0];
  KILN_CHECK(C % groups == 0, op, "input channels {} (input {}) are not divisible by groups {}", C,
             to_string(x.shape()), groups);
  KILN_CHECK(O % groups == 0, op, "output channels {} (weight {}) are not divisible by groups {}", O,
             to_string(w.shape()), groups);
  KILN_CHECK(w.shape()[1] * groups == C, op,
             "input {} has {} channels but weight {} expects {} (weight.shape[1] {} * groups {})",
             to_string(x.shape()), C, to_string(w.shape()), w.shape()[1] * groups, w.shape()[1], groups);
  check_bias(op, bias, w, O);

  Tensor x4 = lift(x, nsp, !batched), w4 = lift(w, nsp, false);
  ConvGeom g;
  g.B = x4.shape()[0];
  g.C = C;
  g.O = O;
  g.groups = groups;
  g.H = x4.shape()[2];
  g.W = x4.shape()[3];
  g.KH = w4.shape()[2];
  g.KW = w4.shape()[3];
  g.sh = stride[0], g.sw = stride[1], g.dh = dilation[0], g.dw = dilation[1];
  const std::array<int64_t, 2> in{g.H, g.W}, k{g.KH, g.KW}, s{g.sh, g.sw}, d{g.dh, g.dw};
  std::array<int64_t, 2> lo{0, 0}, hi{0, 0}, out{0, 0};
  if (padding.mode.empty()) {
    KILN_CHECK(nsp == 2 || padding.h == padding.w, op, "padding must be one int, 'same' or 'valid', got ({}, {})",
               padding.h, padding.w);
    const std::array<int64_t, 2> p{nsp == 1 ? 0 : padding.h, padding.w};
    KILN_CHECK(p[0] >= 0 && p[1] >= 0, op, "padding must be non-negative, got {}",
               nsp == 1 ? fmt::format("{}", padding.w) : fmt::format("({}, {})", padding.h, padding.w));
    lo = hi = p;
  } else if (padding.mode == "same" || padding.mode == "SAME") {
    // Output ceil(in / stride) (spec 000's SAME, as in JAX/TensorFlow; for
    // stride 1 this is PyTorch's 'same': total = d * (K - 1)). The odd
    // element goes on the right/bottom.
    for (size_t i = 0; i < 2; ++i) {
      const int64_t want = (in[i] + s[i] - 1) / s[i];
      const int64_t total = std::max<int64_t>((want - 1) * s[i] + d[i] * (k[i] - 1) + 1 - in[i], 0);
      lo[i] = total / 2;
      hi[i] = total - lo[i];
    }
  } else {
    KILN_CHECK(padding.mode == "valid" || padding.mode == "VALID", op,
               "padding must be an int, a pair, 'same'/'SAME' or 'valid'/'VALID', got '{}'", padding.mode);
  }
  for (size_t i = 0; i < 2; ++i) {
    const int64_t span = in[i] + lo[i] + hi[i] - d[i] * (k[i] - 1) - 1;
    KILN_CHECK(span >= 0, op,
               "output size would be empty: input {} padded by {} is smaller than the dilated kernel of weight {}",
               to_string(x.shape()), nsp == 1 ? fmt::format("{}", lo[1]) : fmt::format("({}, {})", lo[0], lo[1]),
               to_string(w.shape()));
    out[i] = span / s[i] + 1;
    // Bottom/right padding as the last window sees it (NOTE [Conv geometry]).
    hi[i] -= span % s[i];
  }
  g.OH = out[0], g.OW = out[1];
  g.pt = lo[0], g.pl = lo[1], g.pb = hi[0], g.pr = hi[1];
  return lower(conv_fwd(op, g, x4, w4, bias), nsp, !batched);
}

Tensor conv_transpose_any(const char* op, int nsp, const Tensor& x, const Tensor& w, const Tensor& bias,
                          Spatial stride, Spatial padding, Spatial output_padding, int64_t groups, Spatial dilation) {
  check_common(op, x, w, bias, nsp, groups, stride, dilation);
  const bool batched = x.dim() == nsp + 2;
  const int64_t C = x.shape()[batched ? 1 : 0];
  KILN_CHECK(w.shape()[0] == C, op, "input {} has {} channels but weight {} expects {} (weight.shape[0])",
             to_string(x.shape()), C, to_string(w.shape()), w.shape()[0]);
  KILN_CHECK(C % groups == 0, op, "input channels {} (input {}) are not divisible by groups {}", C,
             to_string(x.shape()), groups);
  const int64_t O = w.shape()[1] * groups;
  check_bias(op, bias, w, O);
  for (int i = 2 - nsp; i < 2; ++i) {
    const size_t u = size_t(i);
    KILN_CHECK(padding[u] >= 0, op, "padding must be non-negative, got {}", dims_str(padding, nsp));
    KILN_CHECK(output_padding[u] >= 0 && (output_padding[u] < stride[u] || output_padding[u] < dilation[u]), op,
               "output_padding {} must be smaller than stride {} or dilation {}", dims_str(output_padding, nsp),
               dims_str(stride, nsp), dims_str(dilation, nsp));
  }

  Tensor x4 = lift(x, nsp, !batched), w4 = lift(w, nsp, false);
  ConvGeom g;
  g.B = x4.shape()[0];
  g.C = O;  // the conv that this op is the adjoint of maps O channels (large) to C (small)
  g.O = C;
  g.groups = groups;
  g.OH = x4.shape()[2];
  g.OW = x4.shape()[3];
  g.KH = w4.shape()[2];
  g.KW = w4.shape()[3];
  g.sh = stride[0], g.sw = stride[1], g.dh = dilation[0], g.dw = dilation[1];
  const std::array<int64_t, 2> in{g.OH, g.OW}, k{g.KH, g.KW};
  std::array<int64_t, 2> out{0, 0}, hi{0, 0};
  for (size_t i = 0; i < 2; ++i) {
    out[i] = (in[i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (k[i] - 1) + 1 + output_padding[i];
    KILN_CHECK(out[i] > 0, op, "output size would be {}: input {} with weight {}, stride {}, padding {}", out[i],
               to_string(x.shape()), to_string(w.shape()), dims_str(stride, nsp), dims_str(padding, nsp));
    // The last window of the adjoint conv ends on row out + pb - 1.
    hi[i] = (in[i] - 1) * stride[i] + dilation[i] * (k[i] - 1) + 1 - out[i] - padding[i];
  }
  g.H = out[0], g.W = out[1];
  g.pt = padding[0], g.pl = padding[1], g.pb = hi[0], g.pr = hi[1];
  return lower(conv_bwd_data(op, g, x4, w4, bias), nsp, !batched);
}

Spatial one_d(int64_t v, int64_t unit) { return {{unit, v}}; }
Spatial two_d(Size2 s) { return {{s.h, s.w}}; }

}  // namespace

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, const ConvPadding& padding,
              int64_t dilation, int64_t groups) {
  return conv_any("conv1d", 1, x, weight, bias, one_d(stride, 1), padding, one_d(dilation, 1), groups);
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Size2 stride, const ConvPadding& padding,
              Size2 dilation, int64_t groups) {
  return conv_any("conv2d", 2, x, weight, bias, two_d(stride), padding, two_d(dilation), groups);
}

Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
                        int64_t output_padding, int64_t groups, int64_t dilation) {
  return conv_transpose_any("conv_transpose1d", 1, x, weight, bias, one_d(stride, 1), one_d(padding, 0),
                            one_d(output_padding, 0), groups, one_d(dilation, 1));
}

Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Size2 stride, Size2 padding,
                        Size2 output_padding, int64_t groups, Size2 dilation) {
  return conv_transpose_any("conv_transpose2d", 2, x, weight, bias, two_d(stride), two_d(padding),
                            two_d(output_padding), groups, two_d(dilation));
}

void set_conv_winograd(bool enabled) { backend::cpu::set_conv_winograd(enabled); }

bool conv_winograd() { return backend::cpu::conv_winograd(); }

}  // namespace kiln
