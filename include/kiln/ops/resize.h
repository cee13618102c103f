// Resizing signals, as torch.nn.functional.interpolate (PyTorch 1.13):
// nearest and linear on [N, C, L], nearest and bilinear on [N, C, H, W].
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

enum class InterpolateMode { Nearest, Linear, Bilinear };

/// Exactly one of size / scale_factor is given, one entry per spatial dim
/// (a single entry applies to every spatial dim, like PyTorch's int form).
struct InterpolateOptions {
  std::vector<int64_t> size = {};          // output spatial sizes
  std::vector<double> scale_factor = {};   // output = floor(in * scale); sampling uses 1 / scale
  InterpolateMode mode = InterpolateMode::Nearest;
  bool align_corners = false;         // (bi)linear only: corner pixels' centres line up
};

/// x [N, C, L] (Nearest, Linear) or [N, C, H, W] (Nearest, Bilinear), floating
/// -> [N, C, out...] of x's dtype. Source coordinates follow PyTorch:
/// nearest reads floor(o * scale) with scale = 1 / scale_factor (or in / out
/// when size is given); linear samples scale * (o + 0.5) - 0.5 (clamped at 0),
/// or o * (in - 1) / (out - 1) with align_corners. The gradient is the
/// adjoint: each output's gradient sent back with its weights (a tap of
/// weight exactly 0 sends nothing, where PyTorch would add 0 * inf = NaN).
///   Tensor y = interpolate(x, {.scale_factor = {2}, .mode = InterpolateMode::Bilinear});
Tensor interpolate(const Tensor& x, const InterpolateOptions& opts);

}  // namespace kiln
