// Pooling over 1-D and 2-D signals, as torch.nn.functional: max, average and
// adaptive average. Inputs are [B, C, L] / [B, C, H, W] or unbatched
// [C, L] / [C, H, W]. stride std::nullopt (the default) means the kernel size,
// as PyTorch's stride=None; an explicit stride must be positive.
#pragma once

#include <optional>
#include <utility>

#include "kiln/core/tensor.h"
#include "kiln/ops/conv.h"

namespace kiln {

/// Largest element of each window (NaN wins); out size per dim
/// (in + 2p - d(k-1) - 1) / stride + 1, rounded up with ceil_mode (a last
/// window that would start in the right padding is dropped). The gradient
/// goes to the first largest element of each window.
///   Tensor y = max_pool2d(x, 2);                    // stride = kernel: [B, C, 28, 28] -> [B, C, 14, 14]
///   Tensor z = max_pool2d(x, 3, Size2{2, 1}, 1);    // a pair stride is spelled Size2{h, w}
Tensor max_pool1d(const Tensor& x, int64_t kernel_size, std::optional<int64_t> stride = std::nullopt,
                  int64_t padding = 0, int64_t dilation = 1, bool ceil_mode = false);
Tensor max_pool2d(const Tensor& x, Size2 kernel_size, std::optional<Size2> stride = std::nullopt, Size2 padding = 0,
                  Size2 dilation = 1, bool ceil_mode = false);
/// (values, indices): indices are i64 flat offsets into each input plane
/// (h * W + w), as PyTorch's return_indices=True gives.
std::pair<Tensor, Tensor> max_pool1d_with_indices(const Tensor& x, int64_t kernel_size,
                                                  std::optional<int64_t> stride = std::nullopt, int64_t padding = 0,
                                                  int64_t dilation = 1, bool ceil_mode = false);
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, Size2 kernel_size,
                                                  std::optional<Size2> stride = std::nullopt, Size2 padding = 0,
                                                  Size2 dilation = 1, bool ceil_mode = false);

/// Mean of each window. count_include_pad divides by the window size
/// including zero padding (PyTorch's default); otherwise by the number of
/// input elements in it.
Tensor avg_pool1d(const Tensor& x, int64_t kernel_size, std::optional<int64_t> stride = std::nullopt,
                  int64_t padding = 0, bool ceil_mode = false, bool count_include_pad = true);
Tensor avg_pool2d(const Tensor& x, Size2 kernel_size, std::optional<Size2> stride = std::nullopt, Size2 padding = 0,
                  bool ceil_mode = false, bool count_include_pad = true);

/// Mean over windows that tile the input into exactly output_size cells:
/// cell i spans [floor(i * in / out), ceil((i + 1) * in / out)).
Tensor adaptive_avg_pool1d(const Tensor& x, int64_t output_size);
Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size);

}  // namespace kiln
