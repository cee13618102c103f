// conv1d/conv2d/conv_transpose1d/conv_transpose2d: argument checks, output
// sizes (PyTorch's rules), and three differentiable primitives that are each
// other's vjps (NOTE [Conv geometry] in src/backend/cpu/linalg/conv.h):
//   conv_fwd:      small = conv(large, w)          (conv2d)
//   conv_bwd_data: large = conv^T(small, w)        (conv_transpose2d)
//   conv_bwd_w:    gw = corr(large, small), gb = sum(small)
// so grad-of-grad (create_graph) works to any order.
#include "kiln/ops/conv.h"
#include "kiln/ops/conv_algorithm.h"
#include "kiln/ops/conv_fused.h"

#include <algorithm>
#include <array>
#include <tuple>

#include "kiln/core/replay_fusion.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/record.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "src/backend/backend.h"
#include "src/backend/cpu/elementwise/elementwise.h"
#include "src/backend/cpu/linalg/conv.h"
#include "src/ops/checks.h"

namespace kiln {

namespace {

using backend::cpu::ConvGeom;

Tensor conv_fwd(const char* op, const ConvGeom& g, const Tensor& large, const Tensor& w, const Tensor& bias);
Tensor conv_bwd_data(const char* op, const ConvGeom& g, const Tensor& small, const Tensor& w, const Tensor& bias);
std::pair<Tensor, Tensor> conv_bwd_w(const char* op, const ConvGeom& g, const Tensor& large, const Tensor& small,
                                     bool with_bias);

// The bias gradient of a [B, X, H, W] output (or a blocked [B, X/16, H, W,
// 16] one): sum over batch and space.
Tensor bias_grad(const Tensor& g, bool blocked) {
  return blocked ? reshape(sum(g, {0, 2, 3}), {g.shape()[1] * 16}) : sum(g, {0, 2, 3});
}

// The shape of a [B, X, H, W] activation as the geometry holds it.
Shape act_shape(int64_t B, int64_t X, int64_t H, int64_t W, bool blocked) {
  return blocked ? Shape{B, X / 16, H, W, 16} : Shape{B, X, H, W};
}

// gy * (y > 0): the gradient through a fused ReLU whose output is y. The
// fused kernel, or differentiable ops when the gradient must be (create_graph).
Tensor relu_mask(const Tensor& gy, const Tensor& y) {
  if (needs_grad(gy, y) || gy.dtype() != y.dtype()) return where(gt(y, 0), gy, 0);
  Tensor out = Tensor::empty(gy.shape(), gy.dtype(), gy.device());
  KILN_LAUNCH("binary", backend::cpu::binary(backend::cpu::BinaryOp::relu_backward, out, gy, y, {}));
  return out;
}

// The geometry the backward passes of a fused conv run with: no ReLU (the
// gradient was masked first).
ConvGeom no_relu(ConvGeom g) {
  g.relu = false;
  return g;
}

Tensor conv_fwd(const char* op, const ConvGeom& g, const Tensor& large, const Tensor& w, const Tensor& bias) {
  Tensor small = Tensor::empty(act_shape(g.B, g.O, g.OH, g.OW, g.small_blocked), large.dtype(), large.device());
  KILN_LAUNCH(op, backend::cpu::conv_forward(g, large, w, bias.defined() ? &bias : nullptr, small));
  if (replay::active() && !g.relu)  // the Fusion pass's: conv + activation (docs/compile.md)
    replay::note_conv(large, w, small, bias, [g](const Tensor& l, const Tensor& k, const Tensor* b, const Tensor& s) {
      backend::cpu::conv_forward(g, l, k, b, s);
    });
  if (needs_grad(large, w, bias)) {
    record(op, {large, w, bias}, {small},
           {needs_grad(w) ? large : Tensor(), needs_grad(large) ? w : Tensor(), g.relu ? small : Tensor()},
           [op, g = no_relu(g), relu = g.relu](const VjpArgs& a) -> Grads {
             // One contiguous copy for both kernels (a permuted or broadcast
             // gradient would be copied by each), so that backward-weights
             // also finds the copy backward-data reordered (NOTE [Reordered
             // inputs] in src/backend/cpu/linalg/conv.cpp). A fused ReLU's
             // mask is that same pass.
             const Tensor gy = relu ? relu_mask(a.grad(), a.saved[2]).contiguous() : a.grad().contiguous();
             Tensor gl, gw, gb;
             if (a.needs(0)) gl = conv_bwd_data(op, g, gy, a.saved[1], {});
             if (a.needs(1)) std::tie(gw, gb) = conv_bwd_w(op, g, a.saved[0], gy, a.needs(2));
             else if (a.needs(2)) gb = bias_grad(gy, g.small_blocked);
             return {gl, gw, gb};
           });
  }
  return small;
}

Tensor conv_bwd_data(const char* op, const ConvGeom& g, const Tensor& small, const Tensor& w, const Tensor& bias) {
  Tensor large = Tensor::empty(act_shape(g.B, g.C, g.H, g.W, g.large_blocked), small.dtype(), small.device());
  KILN_LAUNCH(op, backend::cpu::conv_backward_data(g, small, w, bias.defined() ? &bias : nullptr, large));
  if (needs_grad(small, w, bias)) {
    record(op, {small, w, bias}, {large},
           {needs_grad(w) ? small : Tensor(), needs_grad(small) ? w : Tensor(), g.relu ? large : Tensor()},
           [op, g = no_relu(g), relu = g.relu](const VjpArgs& a) -> Grads {
             // [B, C, H, W] (or blocked), one copy for both kernels (as above)
             const Tensor gx = relu ? relu_mask(a.grad(), a.saved[2]).contiguous() : a.grad().contiguous();
             Tensor gs, gw, gb;
             if (a.needs(0)) gs = conv_fwd(op, g, gx, a.saved[1], {});
             if (a.needs(1)) gw = conv_bwd_w(op, g, gx, a.saved[0], false).first;
             if (a.needs(2)) gb = bias_grad(gx, g.large_blocked);
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
        if (a.grads.size() > 1)
          gs = add(gs, reshape(a.grads[1], g.small_blocked ? Shape{1, g.O / 16, 1, 1, 16} : Shape{1, g.O, 1, 1}));
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

// The fused ops' layout and activation (kiln/ops/conv_fused.h); plain ops: none.
struct Fused {
  bool in_blocked = false, out_blocked = false, relu = false;
};

// x's shape as [B, C, H, W] (a blocked x [B, C/16, H, W, 16] has C = 16 * dim 1).
Shape logical_shape(const Tensor& x, bool blocked) {
  const Shape& s = x.shape();
  return blocked ? Shape{s[0], s[1] * 16, s[2], s[3]} : s;
}

void check_blocked(const char* op, const Tensor& x, const Fused& f, int64_t out_channels, const Tensor& w,
                   int64_t groups, const Spatial& dilation) {
  if (f.in_blocked)
    KILN_CHECK(x.dim() == 5 && x.shape()[4] == 16 && x.is_contiguous(), op,
               "a channel-blocked input must be a contiguous [B, C/16, H, W, 16], got {}", describe(x));
  if (f.out_blocked)
    KILN_CHECK(out_channels % 16 == 0, op, "a channel-blocked output needs output channels in multiples of 16, weight {} gives {}",
               to_string(w.shape()), out_channels);
  KILN_CHECK(groups == 1 && dilation[0] == 1 && dilation[1] == 1, op, "fused convolutions take groups 1 and dilation 1");
}

void check_common(const char* op, const Tensor& x, const Tensor& w, const Tensor& bias, int nsp, int64_t groups,
                  const Spatial& stride, const Spatial& dilation, bool blocked = false) {
  check_defined(op, x);
  check_defined(op, w, "weight");
  backend::device_of(op, x, w, bias);
  const int64_t xdim = blocked ? x.dim() - 1 : x.dim();
  KILN_CHECK(xdim == nsp + 1 || xdim == nsp + 2, op,
             "input {} must be {}-D (batched [B, C, {}]) or {}-D (unbatched), got {}-D", to_string(x.shape()),
             nsp + 2, nsp == 1 ? "L" : "H, W", nsp + 1, xdim);
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
                const ConvPadding& padding, Spatial dilation, int64_t groups, const Fused& f = {}) {
  check_common(op, x, w, bias, nsp, groups, stride, dilation, f.in_blocked);
  const Shape xs = logical_shape(x, f.in_blocked);
  const bool batched = int64_t(xs.size()) == nsp + 2;
  const int64_t C = xs[batched ? 1 : 0], O = w.shape()[0];
  KILN_CHECK(C % groups == 0, op, "input channels {} (input {}) are not divisible by groups {}", C,
             to_string(x.shape()), groups);
  KILN_CHECK(O % groups == 0, op, "output channels {} (weight {}) are not divisible by groups {}", O,
             to_string(w.shape()), groups);
  KILN_CHECK(w.shape()[1] * groups == C, op,
             "input {} has {} channels but weight {} expects {} (weight.shape[1] {} * groups {})",
             to_string(x.shape()), C, to_string(w.shape()), w.shape()[1] * groups, w.shape()[1], groups);
  check_bias(op, bias, w, O);
  if (f.in_blocked || f.out_blocked) check_blocked(op, x, f, O, w, groups, dilation);

  const bool blocked = f.in_blocked || f.out_blocked;  // fused ops take batched 2-D input only
  Tensor x4 = blocked ? x : lift(x, nsp, !batched), w4 = lift(w, nsp, false);
  const Shape s4 = blocked ? xs : x4.shape();  // [B, C, H, W]
  ConvGeom g;
  g.B = s4[0];
  g.C = C;
  g.O = O;
  g.groups = groups;
  g.H = s4[2];
  g.W = s4[3];
  g.large_blocked = f.in_blocked, g.small_blocked = f.out_blocked, g.relu = f.relu;
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
               to_string(xs), nsp == 1 ? fmt::format("{}", lo[1]) : fmt::format("({}, {})", lo[0], lo[1]),
               to_string(w.shape()));
    out[i] = span / s[i] + 1;
    // Bottom/right padding as the last window sees it (NOTE [Conv geometry]).
    hi[i] -= span % s[i];
  }
  g.OH = out[0], g.OW = out[1];
  g.pt = lo[0], g.pl = lo[1], g.pb = hi[0], g.pr = hi[1];
  Tensor y = conv_fwd(op, g, x4, w4, bias);
  return blocked ? y : lower(y, nsp, !batched);
}

Tensor conv_transpose_any(const char* op, int nsp, const Tensor& x, const Tensor& w, const Tensor& bias,
                          Spatial stride, Spatial padding, Spatial output_padding, int64_t groups, Spatial dilation,
                          const Fused& f = {}) {
  check_common(op, x, w, bias, nsp, groups, stride, dilation, f.in_blocked);
  const Shape xs = logical_shape(x, f.in_blocked);
  const bool batched = int64_t(xs.size()) == nsp + 2;
  const int64_t C = xs[batched ? 1 : 0];
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

  if (f.in_blocked || f.out_blocked) check_blocked(op, x, f, O, w, groups, dilation);

  const bool blocked = f.in_blocked || f.out_blocked;
  Tensor x4 = blocked ? x : lift(x, nsp, !batched), w4 = lift(w, nsp, false);
  const Shape s4 = blocked ? xs : x4.shape();  // [B, C, H, W]
  ConvGeom g;
  g.B = s4[0];
  g.C = O;  // the conv that this op is the adjoint of maps O channels (large) to C (small)
  g.O = C;
  g.groups = groups;
  g.OH = s4[2];
  g.OW = s4[3];
  g.small_blocked = f.in_blocked, g.large_blocked = f.out_blocked, g.relu = f.relu;
  g.KH = w4.shape()[2];
  g.KW = w4.shape()[3];
  g.sh = stride[0], g.sw = stride[1], g.dh = dilation[0], g.dw = dilation[1];
  const std::array<int64_t, 2> in{g.OH, g.OW}, k{g.KH, g.KW};
  std::array<int64_t, 2> out{0, 0}, hi{0, 0};
  for (size_t i = 0; i < 2; ++i) {
    out[i] = (in[i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (k[i] - 1) + 1 + output_padding[i];
    KILN_CHECK(out[i] > 0, op, "output size would be {}: input {} with weight {}, stride {}, padding {}", out[i],
               to_string(xs), to_string(w.shape()), dims_str(stride, nsp), dims_str(padding, nsp));
    // The last window of the adjoint conv ends on row out + pb - 1.
    hi[i] = (in[i] - 1) * stride[i] + dilation[i] * (k[i] - 1) + 1 - out[i] - padding[i];
  }
  g.H = out[0], g.W = out[1];
  g.pt = padding[0], g.pl = padding[1], g.pb = hi[0], g.pr = hi[1];
  Tensor y = conv_bwd_data(op, g, x4, w4, bias);
  return blocked ? y : lower(y, nsp, !batched);
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

bool channel_blocked_native() { return backend::cpu::channel_blocked_native(); }

Tensor to_channel_blocked(const Tensor& x) {
  const char* op = "to_channel_blocked";
  check_defined(op, x);
  KILN_CHECK(x.dim() == 4 && x.shape()[1] % 16 == 0 && is_floating(x.dtype()), op,
             "input {} must be a floating [B, C, H, W] with C a multiple of 16", describe(x));
  const Shape& s = x.shape();
  Tensor out = Tensor::empty({s[0], s[1] / 16, s[2], s[3], 16}, x.dtype(), x.device());
  KILN_LAUNCH(op, backend::cpu::block_channels(x, out));
  if (needs_grad(x)) {
    // The gradient in x's own layout: NHWC when x is a channels-last view
    // (the VQ-VAE's latents), so the permute before it gets a contiguous one.
    const bool nhwc = !x.is_contiguous() && x.strides() == Strides{s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]};
    record(op, {x}, {out}, {}, [nhwc](const VjpArgs& a) -> Grads {
      return {nhwc ? permute(from_channel_blocked(a.grad(), true), {0, 3, 1, 2}) : from_channel_blocked(a.grad())};
    });
  }
  return out;
}

Tensor from_channel_blocked(const Tensor& x, bool channels_last) {
  const char* op = "from_channel_blocked";
  check_defined(op, x);
  KILN_CHECK(x.dim() == 5 && x.shape()[4] == 16 && is_floating(x.dtype()), op,
             "input {} must be a floating [B, C/16, H, W, 16]", describe(x));
  const Shape& s = x.shape();
  const int64_t B = s[0], C = s[1] * 16, H = s[2], W = s[3];
  Tensor out = Tensor::empty(channels_last ? Shape{B, H, W, C} : Shape{B, C, H, W}, x.dtype(), x.device());
  // channels last: out [B, H, W, C] seen as [B, C, H, W] (NHWC strides).
  KILN_LAUNCH(op, backend::cpu::unblock_channels(x, channels_last ? out.permute({0, 3, 1, 2}) : out));
  if (needs_grad(x))
    record(op, {x}, {out}, {}, [channels_last](const VjpArgs& a) -> Grads {
      return {to_channel_blocked(channels_last ? permute(a.grad(), {0, 3, 1, 2}) : a.grad())};
    });
  return out;
}

Tensor conv2d_fused(const Tensor& x, const Tensor& weight, const Tensor& bias, const FusedConvOptions& o) {
  const char* op = "conv2d_fused";
  KILN_CHECK(!x.defined() || x.dim() == (o.input_blocked ? 5 : 4), op, "input {} must be {}", describe(x),
             o.input_blocked ? "[B, C/16, H, W, 16] (input_blocked)" : "[B, C, H, W]");
  return conv_any(op, 2, x, weight, bias, two_d(o.stride), ConvPadding(o.padding.h, o.padding.w), two_d(1), 1,
                  {o.input_blocked, o.output_blocked, o.relu});
}

Tensor conv_transpose2d_fused(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const FusedConvOptions& o) {
  const char* op = "conv_transpose2d_fused";
  KILN_CHECK(!x.defined() || x.dim() == (o.input_blocked ? 5 : 4), op, "input {} must be {}", describe(x),
             o.input_blocked ? "[B, C/16, H, W, 16] (input_blocked)" : "[B, C, H, W]");
  return conv_transpose_any(op, 2, x, weight, bias, two_d(o.stride), two_d(o.padding), two_d(o.output_padding), 1,
                            two_d(1), {o.input_blocked, o.output_blocked, o.relu});
}

void set_conv_winograd(bool enabled) { backend::cpu::set_conv_winograd(enabled); }

bool conv_winograd() { return backend::cpu::conv_winograd(); }

}  // namespace kiln
