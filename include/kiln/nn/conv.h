// Convolution layers (SPECS L2-L5): Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d.
// Letters: B = batch, C = in_channels, O = out_channels, g = groups,
// L / H / W = spatial sizes, K = kernel size.
//
//   nn::Conv1d conv1(8, 16, 5, rngs, {.stride = 2});        // [B, 8, L] -> [B, 16, (L - 5) / 2 + 1]
//   nn::Conv2d conv(3, 16, 3, rngs, {.padding = "same"});   // [B, 3, H, W] -> [B, 16, H, W]
//   nn::ConvTranspose2d up(16, 8, 2, rngs, {.stride = 2});  // [B, 16, H, W] -> [B, 8, 2H, 2W]
#pragma once

#include <cstdint>
#include <string>

#include "kiln/nn/init.h"
#include "kiln/nn/module.h"
#include "kiln/ops/conv.h"

namespace kiln::nn {

// Conv2d's options: sizes per spatial dim (an int means both).
struct ConvOptions {
  Size2 stride = 1;
  ConvPadding padding = 0;  // int, {h, w}, "same"/"SAME" or "valid"/"VALID"
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

// Conv1d's options: one spatial dim, so plain ints (PyTorch's Conv1d arguments).
struct Conv1dOptions {
  int64_t stride = 1;
  ConvPadding padding = 0;  // an int, "same"/"SAME" or "valid"/"VALID" (a pair is an error)
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

struct ConvTransposeOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 output_padding = 0;  // extra rows/cols on the bottom/right; < stride or dilation
  int64_t groups = 1;
  Size2 dilation = 1;
  bool bias = true;  // spec 002's ConvTranspose1d has none: pass {.bias = false}
};

// [B, C, L] (or unbatched [C, L]) -> [B, O, Lout]; weight [O, C/g, K], bias [O].
// Weight from init.weight with fan_in = C/g * K (L18), bias from init.bias.
class Conv1d : public Module {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, const Init& init, Conv1dOptions options = {});
  Tensor forward(const Tensor& x) const;
  std::string extra_repr() const override;

  int64_t in_channels, out_channels, kernel_size;
  Conv1dOptions options;
  Parameter weight;  // [O, C/g, K]
  Parameter bias;    // [O], undefined without bias
};

// NCHW: [B, C, H, W] (or [C, H, W]) -> [B, O, OH, OW]; weight [O, C/g, KH, KW],
// fan_in = C/g * KH * KW.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, const Init& init, ConvOptions options = {});
  Tensor forward(const Tensor& x) const;
  std::string extra_repr() const override;

  int64_t in_channels, out_channels;
  Size2 kernel_size;
  ConvOptions options;
  Parameter weight;  // [O, C/g, KH, KW]
  Parameter bias;    // [O]
};

// The transposed convolutions store their weight as [O, C/g, K...] (spec 000:
// [O, I, KH, KW]; PyTorch stores [C, O/g, K...]). from_torch converts a PyTorch
// weight, so load_state_dict(sd, {.torch_layout = true}) imports it. Fan-in
// for init is PyTorch's: O/g * prod(K) (its fan rule reads dim 1 of its
// [C, O/g, K...] weight). Output size per dim (spec 000, with dilation d):
// (in - 1) * stride - 2 * padding + d * (K - 1) + 1 + output_padding.
class ConvTranspose1d : public Module {
 public:
  ConvTranspose1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, const Init& init,
                  ConvTransposeOptions options = {});
  Tensor forward(const Tensor& x) const;
  std::string extra_repr() const override;
  Tensor from_torch(const std::string& name, const Tensor& value) const override;

  int64_t in_channels, out_channels, kernel_size;
  ConvTransposeOptions options;
  Parameter weight;  // [O, C/g, K]
  Parameter bias;    // [O]
};

class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, const Init& init,
                  ConvTransposeOptions options = {});
  Tensor forward(const Tensor& x) const;
  std::string extra_repr() const override;
  Tensor from_torch(const std::string& name, const Tensor& value) const override;

  int64_t in_channels, out_channels;
  Size2 kernel_size;
  ConvTransposeOptions options;
  Parameter weight;  // [O, C/g, KH, KW]
  Parameter bias;    // [O]
};

}  // namespace kiln::nn
