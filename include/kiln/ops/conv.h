// Convolutions over 1-D and 2-D signals, in PyTorch's functional layouts and
// argument order (torch.nn.functional.conv2d, conv_transpose2d, ...).
// Letters: B = batch, C = input channels, O = output channels, H/W/L =
// spatial sizes, K = kernel size, g = groups.
#pragma once

#include <concepts>
#include <string>

#include "kiln/core/tensor.h"

namespace kiln {

/// A 2-D size: one int for both dims, or {h, w}.
struct Size2 {
  int64_t h = 0, w = 0;
  Size2(int64_t v) : h(v), w(v) {}  // NOLINT: conv2d(x, w, {}, 2) means stride 2 in both dims
  Size2(int64_t h_, int64_t w_) : h(h_), w(w_) {}
};

/// Convolution padding: an int (every side), {h, w} (both sides of each dim)
/// or "same" / "valid" (either case: spec 000 writes SAME / VALID). "same"
/// gives an output of ceil(in / stride) per dim, padding
/// max((out - 1) * stride + dilation * (K - 1) + 1 - in, 0) in total with the
/// odd element on the right/bottom: PyTorch's 'same' for stride 1 (PyTorch
/// rejects other strides), JAX/TensorFlow's SAME for any stride.
struct ConvPadding {
  int64_t h = 0, w = 0;
  std::string mode;  // "" (explicit sizes), "same"/"SAME" or "valid"/"VALID"; anything else is an error at the op
  // A template so that a literal 0 picks this and not the const char* form.
  template <std::integral I>
  ConvPadding(I v) : h(int64_t(v)), w(int64_t(v)) {}  // NOLINT
  ConvPadding(int64_t h_, int64_t w_) : h(h_), w(w_) {}
  ConvPadding(const char* m) : mode(m) {}  // NOLINT
  ConvPadding(std::string m) : mode(std::move(m)) {}  // NOLINT
};

/// x [B, C, L] (or unbatched [C, L]), weight [O, C/g, K], bias [O] or
/// undefined -> [B, O, Lout], Lout = (L + 2p - d(K-1) - 1) / stride + 1.
/// padding: an int, "same" or "valid".
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, int64_t stride = 1,
              const ConvPadding& padding = 0, int64_t dilation = 1, int64_t groups = 1);

/// x [B, C, H, W] (NCHW; or unbatched [C, H, W]), weight [O, C/g, KH, KW],
/// bias [O] or undefined -> [B, O, OH, OW]. f32 and bf16 run on oneDNN, f64
/// on the plain loops.
///   Tensor y = conv2d(x, w, b, /*stride=*/1, /*padding=*/"same");
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Size2 stride = 1,
              const ConvPadding& padding = 0, Size2 dilation = 1, int64_t groups = 1);

/// The gradient of conv1d with respect to its input, as a layer:
/// x [B, C, L], weight [C, O/g, K] -> [B, O, Lout] with
/// Lout = (L - 1) * stride - 2 * padding + dilation * (K - 1) + 1 + output_padding.
/// output_padding must be smaller than stride or dilation.
Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, int64_t stride = 1,
                        int64_t padding = 0, int64_t output_padding = 0, int64_t groups = 1, int64_t dilation = 1);

/// x [B, C, H, W], weight [C, O/g, KH, KW], bias [O] -> [B, O, OH, OW], each
/// dim as in conv_transpose1d.
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Size2 stride = 1,
                        Size2 padding = 0, Size2 output_padding = 0, int64_t groups = 1, Size2 dilation = 1);

}  // namespace kiln
