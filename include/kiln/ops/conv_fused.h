// Fused convolutions for conv stacks: a ReLU applied in the convolution's own
// pass, and channel-blocked activations that consecutive convolutions pass to
// each other without converting (docs/performance.md, "third pass: VQ-VAE").
//
// A channel-blocked tensor holds a [B, C, H, W] activation as
// [B, C/16, H, W, 16] contiguous: channel c is block c / 16, lane c % 16.
// It is oneDNN's nChw16c, the layout its CPU convolution kernels compute in:
// conv2d on NCHW reorders its input into it and its output back out of it at
// every call (forward and backward), which a stack of blocked convolutions
// skips. Like PyTorch's to_mkldnn() tensors, it is for chains of convs: ReLU
// and other elementwise ops work on it as they are; anything that mixes
// channels or positions wants from_channel_blocked first.
//
//   Tensor h = conv2d_fused(x, w1, b1, {.stride = 2, .padding = 1, .output_blocked = true, .relu = true});
//   Tensor y = conv2d_fused(h, w2, b2, {.padding = 1, .input_blocked = true});   // [B, O, H, W]
//
// Results equal conv2d / conv_transpose2d followed by relu (and the layout
// change) up to f32 rounding; f64, bf16 and geometries oneDNN does not take
// blocked run the plain kernels on converted copies. Differentiable to any
// order (the ReLU's mask is a constant of the backward).
#pragma once

#include "kiln/ops/conv.h"

namespace kiln {

/// x [B, C, H, W] (any strides; a channels-last view, [B, H, W, C]
/// permuted, converts as fast as NCHW) -> [B, C/16, H, W, 16] contiguous, C a
/// multiple of 16. Differentiable.
Tensor to_channel_blocked(const Tensor& x);
/// x [B, C/16, H, W, 16] -> [B, C, H, W] contiguous, or with channels_last
/// [B, H, W, C] contiguous. Differentiable.
Tensor from_channel_blocked(const Tensor& x, bool channels_last = false);

/// Whether this CPU's convolution kernels compute on channel-blocked f32
/// activations natively (oneDNN's AVX-512 kernels). Elsewhere (AVX2, whose
/// kernels block by 8) the fused ops convert to and from NCHW around each
/// call: the same results, no faster than conv2d; callers pick plain there.
bool channel_blocked_native();

struct FusedConvOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 output_padding = 0;     // conv_transpose2d_fused only
  bool input_blocked = false;   // x is [B, C/16, H, W, 16] (to_channel_blocked's layout)
  bool output_blocked = false;  // the result is [B, O/16, OH, OW, 16]
  bool relu = false;            // relu(conv(x) + bias), in the convolution's pass
};

/// conv2d (groups 1, dilation 1) with the options above: x [B, C, H, W] or,
/// input_blocked, [B, C/16, H, W, 16]; weight [O, C, KH, KW]; bias [O] or
/// undefined -> [B, O, OH, OW] or, output_blocked, [B, O/16, OH, OW, 16].
Tensor conv2d_fused(const Tensor& x, const Tensor& weight, const Tensor& bias, const FusedConvOptions& options);

/// conv_transpose2d (groups 1, dilation 1) with the options above: x
/// [B, C, H, W] (or blocked), weight [C, O, KH, KW] (PyTorch's layout, as
/// conv_transpose2d), bias [O] -> [B, O, OH, OW] (or blocked).
Tensor conv_transpose2d_fused(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const FusedConvOptions& options);

}  // namespace kiln
