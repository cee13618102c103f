// CPU convolution kernels: oneDNN's forward, backward-data and
// backward-weights primitives (f32, bf16) behind a per-thread LRU cache, and
// the plain loops in cpu::ref (the oracle, and the f64 path).
#pragma once

#include <cstdint>
#include <string>

#include "kiln/core/tensor.h"

namespace kiln::backend::cpu {

// NOTE [Conv geometry]: every convolution kernel sees one 2-D forward
// convolution (1-D ops add a unit H dim) from a "large" signal to a "small"
// one:
//   small[b, o, oh, ow] = sum_{c in group(o), kh, kw}
//       large[b, c, oh*sh + kh*dh - pt, ow*sw + kw*dw - pl] * w[o, c % (C/g), kh, kw]
// large is [B, C, H, W], small [B, O, OH, OW], w [O, C/g, KH, KW]; reads
// outside large are zeros. conv2d is this product (x large, y small);
// conv_transpose2d is its adjoint (x small, y large, PyTorch's transposed
// weight [C_in, O/g, K] is exactly w here). pb/pr pad bottom/right so that
// the last window ends on the last padded row:
//   OH = (H + pt + pb - dh*(KH-1) - 1) / sh + 1 exactly (pb may be negative
// when trailing rows are never read).
struct ConvGeom {
  int64_t B = 0, C = 0, O = 0, groups = 1;
  int64_t H = 0, W = 0, OH = 0, OW = 0, KH = 0, KW = 0;
  int64_t sh = 1, sw = 1, dh = 1, dw = 1;
  int64_t pt = 0, pl = 0, pb = 0, pr = 0;
  // NOTE [Blocked activations]: a blocked tensor is held channel-blocked,
  // [B, C/16, H, W, 16] contiguous (oneDNN's nChw16c: channel c at block
  // c / 16, lane c % 16), its channel count a multiple of 16. Consecutive
  // convolutions that pass blocked tensors skip the NCHW <-> nChw16c reorders
  // around each oneDNN call. Other dtypes than f32, or a geometry oneDNN
  // refuses blocked, run the plain path on converted copies.
  bool large_blocked = false, small_blocked = false;
  // conv_forward / conv_backward_data: the output (small / large) goes
  // through ReLU after the bias (a oneDNN post-op where the primitive has it).
  bool relu = false;
};

/// small = conv(large, w) + bias[O] (bias may be null). large, w any layout;
/// small contiguous [B, O, OH, OW]; all one floating dtype.
void conv_forward(const ConvGeom& g, const Tensor& large, const Tensor& w, const Tensor* bias, const Tensor& small);
/// large = conv^T(small, w) + bias[C]: the adjoint of conv_forward in its
/// first argument. large contiguous [B, C, H, W].
void conv_backward_data(const ConvGeom& g, const Tensor& small, const Tensor& w, const Tensor* bias,
                        const Tensor& large);
/// gw [O, C/g, KH, KW] = d sum(small * conv(large, w)) / d w, and, when gb is
/// not null, gb [O] = small summed over batch and space. Outputs contiguous.
void conv_backward_weights(const ConvGeom& g, const Tensor& large, const Tensor& small, const Tensor& gw,
                           const Tensor* gb);

/// [B, C/16, H, W, 16] (contiguous) <-> [B, C, H, W] (any strides; oneDNN's
/// reorder for f32 NCHW or NHWC, a strided copy otherwise), any float dtype,
/// C a multiple of 16 (NOTE [Blocked activations]). block_channels writes a
/// contiguous blocked tensor; unblock_channels writes plain in place.
void unblock_channels(const Tensor& blocked, const Tensor& plain);
void block_channels(const Tensor& plain, const Tensor& blocked);

/// Whether oneDNN computes on 16-channel-blocked f32 activations natively
/// here (AVX-512); elsewhere the blocked paths convert (correct, no faster).
bool channel_blocked_native();

/// Which implementation ran last on this thread ("brg:avx512_core",
/// "jit:avx512_core", "ref" for cpu::ref, ...): tests check that f32 does not
/// fall back to slow code.
const std::string& last_conv_impl();

/// Whether eligible convolutions (f32, 3x3, stride 1, no groups or dilation,
/// channels multiples of 16) run oneDNN's Winograd kernels where the CPU has
/// them (NOTE [Winograd] in conv.cpp). On by default; KILN_CONV_WINOGRAD=0 at
/// start-up or set_conv_winograd(false) keeps every convolution direct.
/// Process-wide; primitives are cached per setting.
void set_conv_winograd(bool enabled);
bool conv_winograd();

/// Primitive-cache statistics of the calling thread (tests, benchmarks).
struct ConvCacheStats {
  int64_t hits = 0, misses = 0, size = 0;
  int64_t weight_reorders = 0;   // weights reordered into oneDNN's layout
  int64_t reorders_skipped = 0;  // inputs found already reordered (NOTE [Reordered inputs] in conv.cpp)
};
ConvCacheStats conv_cache_stats();

namespace ref {
// Plain loops over every output element, accumulating in f64. Same contracts.
void conv_forward(const ConvGeom& g, const Tensor& large, const Tensor& w, const Tensor* bias, const Tensor& small);
void conv_backward_data(const ConvGeom& g, const Tensor& small, const Tensor& w, const Tensor* bias,
                        const Tensor& large);
void conv_backward_weights(const ConvGeom& g, const Tensor& large, const Tensor& small, const Tensor& gw,
                           const Tensor* gb);
}  // namespace ref

}  // namespace kiln::backend::cpu
