// Pooling layers (SPECS L6-L7): MaxPool1d/2d, AvgPool1d/2d, AdaptiveAvgPool1d/2d.
// No parameters; inputs [B, C, L] / [B, C, H, W] or unbatched [C, L] / [C, H, W].
// stride std::nullopt (the default) means the kernel size, as PyTorch's
// stride=None; a given stride must be positive. A pair stride is Size2{h, w}.
//
//   nn::MaxPool2d pool(2);                  // [B, C, 28, 28] -> [B, C, 14, 14]
//   nn::AdaptiveAvgPool2d gap({1, 1});      // [B, C, H, W]   -> [B, C, 1, 1]
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/nn/module.h"
#include "kiln/ops/pool.h"

namespace kiln::nn {

class MaxPool1d : public Module {
 public:
  explicit MaxPool1d(int64_t kernel_size, std::optional<int64_t> stride = std::nullopt, int64_t padding = 0, int64_t dilation = 1,
                     bool ceil_mode = false);
  Tensor forward(const Tensor& x) const;
  std::string extra_repr() const override;
  int64_t kernel_size, stride, padding, dilation;  // stride resolved: the kernel when not given
  bool ceil_mode;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt, Size2 padding = 0, Size2 dilation = 1,
                     bool ceil_mode = false);
  Tensor forward(const Tensor& x) const;
  std::string extra_repr() const override;
  Size2 kernel_size, stride, padding, dilation;  // stride resolved: the kernel when not given
  bool ceil_mode;
};

// count_include_pad: divide by the whole window, padding included (PyTorch's default).
class AvgPool1d : public Module {
 public:
  explicit AvgPool1d(int64_t kernel_size, std::optional<int64_t> stride = std::nullopt, int64_t padding = 0, bool ceil_mode = false,
                     bool count_include_pad = true);
  Tensor forward(const Tensor& x) const;
  std::string extra_repr() const override;
  int64_t kernel_size, stride, padding;
  bool ceil_mode, count_include_pad;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt, Size2 padding = 0, bool ceil_mode = false,
                     bool count_include_pad = true);
  Tensor forward(const Tensor& x) const;
  std::string extra_repr() const override;
  Size2 kernel_size, stride, padding;
  bool ceil_mode, count_include_pad;
};

// Any output size (spec 000 only requires (1, 1), the global mean): cell i
// averages [floor(i * in / out), ceil((i + 1) * in / out)).
class AdaptiveAvgPool1d : public Module {
 public:
  explicit AdaptiveAvgPool1d(int64_t output_size);
  Tensor forward(const Tensor& x) const;
  std::string extra_repr() const override;
  int64_t output_size;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size);
  Tensor forward(const Tensor& x) const;
  std::string extra_repr() const override;
  Size2 output_size;
};

}  // namespace kiln::nn
