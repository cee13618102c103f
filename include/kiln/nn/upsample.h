// Upsample (L16): nearest / (bi)linear resizing of [N, C, L] or [N, C, H, W]
// inputs, as torch.nn.Upsample (the op: kiln::interpolate, ops/resize.h).
//   nn::Upsample up({.scale_factor = {2}, .mode = InterpolateMode::Bilinear});
#pragma once

#include <string>

#include "kiln/nn/module.h"
#include "kiln/ops/resize.h"

namespace kiln::nn {

class Upsample : public Module {
 public:
  // Exactly one of options.size / options.scale_factor (checked here, at
  // construction, as well as at every call by the op).
  explicit Upsample(InterpolateOptions options);

  Tensor forward(const Tensor& x) const { return interpolate(x, options); }
  std::string extra_repr() const override;

  InterpolateOptions options;
};

}  // namespace kiln::nn
