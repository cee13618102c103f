// Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d: argument checks, parameters
// and the layout change for the transposed weights; the math is in ops/conv.
#include "kiln/nn/conv.h"

#include <fmt/format.h>

#include "kiln/core/error.h"
#include "kiln/ops/shape.h"
#include "src/nn/layer_error.h"

namespace kiln::nn {

namespace {

std::string pair_str(Size2 s) { return fmt::format("({}, {})", s.h, s.w); }

std::string padding_str(const ConvPadding& p, int dims) {
  if (!p.mode.empty()) return p.mode;
  return dims == 1 ? fmt::format("({},)", p.h) : pair_str({p.h, p.w});
}

void check_common(const char* layer, int64_t in, int64_t out, int64_t groups, Size2 stride, Size2 dilation) {
  KILN_CHECK(in > 0 && out > 0, layer, "in_channels {} and out_channels {} must be positive", in, out);
  KILN_CHECK(groups > 0, layer, "groups must be positive, got {}", groups);
  KILN_CHECK(in % groups == 0, layer, "in_channels {} is not divisible by groups {}", in, groups);
  KILN_CHECK(out % groups == 0, layer, "out_channels {} is not divisible by groups {}", out, groups);
  KILN_CHECK(stride.h > 0 && stride.w > 0, layer, "stride {} must be positive", pair_str(stride));
  KILN_CHECK(dilation.h > 0 && dilation.w > 0, layer, "dilation {} must be positive", pair_str(dilation));
}

void check_padding(const char* layer, const ConvPadding& p) {
  if (p.mode.empty()) {
    KILN_CHECK(p.h >= 0 && p.w >= 0, layer, "padding {} must be non-negative", pair_str({p.h, p.w}));
    return;
  }
  KILN_CHECK(p.mode == "same" || p.mode == "SAME" || p.mode == "valid" || p.mode == "VALID", layer,
             "padding '{}' must be an int, a pair, \"same\" or \"valid\"", p.mode);
}

// A 1-d layer takes scalar sizes: a pair (Conv1d's ConvPadding {h, w}, ConvTranspose1d's Size2) must have h == w.
void check_scalar(const char* layer, const char* what, int64_t h, int64_t w) {
  KILN_CHECK(h == w, layer, "{} ({}, {}) must be a single int for a 1-d layer", what, h, w);
}

// x [..., C, spatial...] with `spatial` trailing dims, batched or not.
void check_input(const char* layer, const Tensor& x, int spatial, int64_t in_channels) {
  KILN_CHECK(x.defined(), layer, "input is undefined");
  const int64_t d = x.dim();
  KILN_CHECK(d == spatial + 1 || d == spatial + 2, layer, "input {} must be {}-D (batched) or {}-D (unbatched), {}",
             to_string(x.shape()), spatial + 2, spatial + 1, spatial == 1 ? "[B, C, L] or [C, L]" : "[B, C, H, W] or [C, H, W]");
  const int64_t c = x.shape()[size_t(d - spatial - 1)];
  KILN_CHECK(c == in_channels, layer, "input {} has {} channels, expected {} (in_channels)", to_string(x.shape()), c,
             in_channels);
}

// kiln's transposed weight [O, C/g, K...] <-> the op's (PyTorch's) [C, O/g, K...].
// Within group j both hold the same [C/g, O/g] block, transposed: reshape to
// [g, a, b, K...], swap a and b, reshape back.
Tensor swap_group_blocks(const Tensor& w, int64_t groups) {
  if (groups == 1) return transpose(w, 0, 1);
  const Shape& s = w.shape();
  const int64_t a = s[0] / groups, b = s[1];
  Shape split = {groups, a, b};
  Shape perm = {0, 2, 1};
  for (size_t i = 2; i < s.size(); ++i) {
    split.push_back(s[i]);
    perm.push_back(int64_t(i) + 1);
  }
  Shape merged = {groups * b, a};
  for (size_t i = 2; i < s.size(); ++i) merged.push_back(s[i]);
  return reshape(permute(reshape(w, split), perm), merged);
}

void check_transpose_args(const char* layer, const ConvTransposeOptions& o) {
  KILN_CHECK(o.padding.h >= 0 && o.padding.w >= 0, layer, "padding {} must be non-negative", pair_str(o.padding));
  KILN_CHECK(o.output_padding.h >= 0 && o.output_padding.w >= 0, layer, "output_padding {} must be non-negative",
             pair_str(o.output_padding));
  KILN_CHECK((o.output_padding.h < o.stride.h || o.output_padding.h < o.dilation.h) &&
                 (o.output_padding.w < o.stride.w || o.output_padding.w < o.dilation.w),
             layer, "output_padding {} must be smaller than stride {} or dilation {}", pair_str(o.output_padding),
             pair_str(o.stride), pair_str(o.dilation));
}

template <class O>
std::string common_repr(std::string s, const O& o, int dims, bool has_bias) {
  auto show = [&](Size2 v) { return dims == 1 ? fmt::format("({},)", v.h) : pair_str(v); };
  const Size2 dilation = o.dilation;  // Conv1dOptions' int64_t means both
  if (dilation.h != 1 || dilation.w != 1) s += ", dilation=" + show(dilation);
  if (o.groups != 1) s += fmt::format(", groups={}", o.groups);
  if (!has_bias) s += ", bias=false";
  return s;
}

}  // namespace

// ---- Conv1d ----

Conv1d::Conv1d(int64_t in, int64_t out, int64_t k, const Init& init, Conv1dOptions o)
    : in_channels(in), out_channels(out), kernel_size(k), options(std::move(o)) {
  check_common("Conv1d", in, out, options.groups, options.stride, options.dilation);
  KILN_CHECK(k > 0, "Conv1d", "kernel_size must be positive, got {}", k);
  check_padding("Conv1d", options.padding);
  if (options.padding.mode.empty()) check_scalar("Conv1d", "padding", options.padding.h, options.padding.w);
  const Fan fan{in / options.groups * k, out / options.groups * k};
  weight = register_parameter("weight", init.make_weight({out, in / options.groups, k}, fan));
  if (options.bias) bias = register_parameter("bias", init.make_bias({out}, fan));
}

Tensor Conv1d::forward(const Tensor& x) const {
  check_input("Conv1d", x, 1, in_channels);
  return in_layer("Conv1d", [&] {
    return conv1d(to_compute(x), to_compute(weight), to_compute(bias), options.stride, options.padding,
                  options.dilation, options.groups);
  });
}

std::string Conv1d::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel_size=({},), stride=({},)", in_channels, out_channels, kernel_size,
                              options.stride);
  if (!options.padding.mode.empty() || options.padding.h != 0) s += ", padding=" + padding_str(options.padding, 1);
  return common_repr(s, options, 1, bias.defined());
}

// ---- Conv2d ----

Conv2d::Conv2d(int64_t in, int64_t out, Size2 k, const Init& init, ConvOptions o)
    : in_channels(in), out_channels(out), kernel_size(k), options(std::move(o)) {
  check_common("Conv2d", in, out, options.groups, options.stride, options.dilation);
  KILN_CHECK(k.h > 0 && k.w > 0, "Conv2d", "kernel_size {} must be positive", pair_str(k));
  check_padding("Conv2d", options.padding);
  const Fan fan{in / options.groups * k.h * k.w, out / options.groups * k.h * k.w};
  weight = register_parameter("weight", init.make_weight({out, in / options.groups, k.h, k.w}, fan));
  if (options.bias) bias = register_parameter("bias", init.make_bias({out}, fan));
}

Tensor Conv2d::forward(const Tensor& x) const {
  check_input("Conv2d", x, 2, in_channels);
  return in_layer("Conv2d", [&] {
    return conv2d(to_compute(x), to_compute(weight), to_compute(bias), options.stride, options.padding, options.dilation, options.groups);
  });
}

std::string Conv2d::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel_size={}, stride={}", in_channels, out_channels, pair_str(kernel_size),
                              pair_str(options.stride));
  if (!options.padding.mode.empty() || options.padding.h != 0 || options.padding.w != 0)
    s += ", padding=" + padding_str(options.padding, 2);
  return common_repr(s, options, 2, bias.defined());
}

// ---- ConvTranspose1d ----

ConvTranspose1d::ConvTranspose1d(int64_t in, int64_t out, int64_t k, const Init& init, ConvTransposeOptions o)
    : in_channels(in), out_channels(out), kernel_size(k), options(o) {
  check_common("ConvTranspose1d", in, out, o.groups, o.stride, o.dilation);
  KILN_CHECK(k > 0, "ConvTranspose1d", "kernel_size must be positive, got {}", k);
  check_scalar("ConvTranspose1d", "stride", o.stride.h, o.stride.w);
  check_scalar("ConvTranspose1d", "dilation", o.dilation.h, o.dilation.w);
  check_scalar("ConvTranspose1d", "padding", o.padding.h, o.padding.w);
  check_scalar("ConvTranspose1d", "output_padding", o.output_padding.h, o.output_padding.w);
  check_transpose_args("ConvTranspose1d", o);
  // PyTorch's fan: dim 1 of its [C, O/g, K] weight times the receptive field.
  const Fan fan{out / o.groups * k, in / o.groups * k};
  weight = register_parameter("weight", init.make_weight({out, in / o.groups, k}, fan));
  if (o.bias) bias = register_parameter("bias", init.make_bias({out}, fan));
}

Tensor ConvTranspose1d::forward(const Tensor& x) const {
  check_input("ConvTranspose1d", x, 1, in_channels);
  return in_layer("ConvTranspose1d", [&] {
    return conv_transpose1d(to_compute(x), swap_group_blocks(to_compute(weight), options.groups), to_compute(bias), options.stride.h, options.padding.h,
                            options.output_padding.h, options.groups, options.dilation.h);
  });
}

Tensor ConvTranspose1d::from_torch(const std::string& name, const Tensor& value) const {
  // PyTorch [C, O/g, K] -> [O, C/g, K]; a wrong shape passes through for load_state_dict to report.
  if (name != "weight" || value.dim() != 3 || value.shape()[0] != in_channels) return value;
  return contiguous(swap_group_blocks(value, options.groups));
}

std::string ConvTranspose1d::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel_size=({},), stride=({},)", in_channels, out_channels, kernel_size,
                              options.stride.h);
  if (options.padding.h != 0) s += fmt::format(", padding=({},)", options.padding.h);
  if (options.output_padding.h != 0) s += fmt::format(", output_padding=({},)", options.output_padding.h);
  return common_repr(s, options, 1, bias.defined());
}

// ---- ConvTranspose2d ----

ConvTranspose2d::ConvTranspose2d(int64_t in, int64_t out, Size2 k, const Init& init, ConvTransposeOptions o)
    : in_channels(in), out_channels(out), kernel_size(k), options(o) {
  check_common("ConvTranspose2d", in, out, o.groups, o.stride, o.dilation);
  KILN_CHECK(k.h > 0 && k.w > 0, "ConvTranspose2d", "kernel_size {} must be positive", pair_str(k));
  check_transpose_args("ConvTranspose2d", o);
  const Fan fan{out / o.groups * k.h * k.w, in / o.groups * k.h * k.w};
  weight = register_parameter("weight", init.make_weight({out, in / o.groups, k.h, k.w}, fan));
  if (o.bias) bias = register_parameter("bias", init.make_bias({out}, fan));
}

Tensor ConvTranspose2d::forward(const Tensor& x) const {
  check_input("ConvTranspose2d", x, 2, in_channels);
  return in_layer("ConvTranspose2d", [&] {
    return conv_transpose2d(to_compute(x), swap_group_blocks(to_compute(weight), options.groups), to_compute(bias), options.stride, options.padding,
                            options.output_padding, options.groups, options.dilation);
  });
}

Tensor ConvTranspose2d::from_torch(const std::string& name, const Tensor& value) const {
  if (name != "weight" || value.dim() != 4 || value.shape()[0] != in_channels) return value;
  return contiguous(swap_group_blocks(value, options.groups));
}

std::string ConvTranspose2d::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel_size={}, stride={}", in_channels, out_channels, pair_str(kernel_size),
                              pair_str(options.stride));
  if (options.padding.h != 0 || options.padding.w != 0) s += ", padding=" + pair_str(options.padding);
  if (options.output_padding.h != 0 || options.output_padding.w != 0)
    s += ", output_padding=" + pair_str(options.output_padding);
  return common_repr(s, options, 2, bias.defined());
}

}  // namespace kiln::nn
