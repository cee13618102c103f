// Pooling layers: argument checks at construction and on the input's rank;
// the windows are computed by ops/pool.
#include "kiln/nn/pool.h"

#include <fmt/format.h>

#include "kiln/core/error.h"
#include "src/nn/layer_error.h"

namespace kiln::nn {

namespace {

std::string pair_str(Size2 s) { return fmt::format("({}, {})", s.h, s.w); }

// Shared construction rules, per spatial dim (PyTorch's): kernel > 0, stride > 0
// (std::nullopt, the kernel, was resolved before), dilation > 0,
// 0 <= padding <= kernel / 2.
void check_window(const char* layer, int64_t k, int64_t s, int64_t p, int64_t d) {
  KILN_CHECK(k > 0, layer, "kernel_size must be positive, got {}", k);
  KILN_CHECK(s > 0, layer, "stride must be positive (std::nullopt for kernel_size), got {}", s);
  KILN_CHECK(d > 0, layer, "dilation must be positive, got {}", d);
  KILN_CHECK(p >= 0 && p <= k / 2, layer, "padding {} must be between 0 and half of kernel_size {}", p, k);
}

void check_rank(const char* layer, const Tensor& x, int spatial) {
  KILN_CHECK(x.defined(), layer, "input is undefined");
  KILN_CHECK(x.dim() == spatial + 1 || x.dim() == spatial + 2, layer, "input {} must be {}",
             to_string(x.shape()), spatial == 1 ? "[B, C, L] or [C, L]" : "[B, C, H, W] or [C, H, W]");
}

}  // namespace

MaxPool1d::MaxPool1d(int64_t k, std::optional<int64_t> s, int64_t p, int64_t d, bool ceil)
    : kernel_size(k), stride(s.value_or(k)), padding(p), dilation(d), ceil_mode(ceil) {
  check_window("MaxPool1d", k, stride, p, d);
}

Tensor MaxPool1d::forward(const Tensor& x) const {
  check_rank("MaxPool1d", x, 1);
  return in_layer("MaxPool1d", [&] { return max_pool1d(x, kernel_size, stride, padding, dilation, ceil_mode); });
}

std::string MaxPool1d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}, dilation={}, ceil_mode={}", kernel_size, stride, padding,
                     dilation, ceil_mode);
}

MaxPool2d::MaxPool2d(Size2 k, std::optional<Size2> s, Size2 p, Size2 d, bool ceil)
    : kernel_size(k), stride(s.value_or(k)), padding(p), dilation(d), ceil_mode(ceil) {
  check_window("MaxPool2d", k.h, stride.h, p.h, d.h);
  check_window("MaxPool2d", k.w, stride.w, p.w, d.w);
}

Tensor MaxPool2d::forward(const Tensor& x) const {
  check_rank("MaxPool2d", x, 2);
  return in_layer("MaxPool2d", [&] { return max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode); });
}

std::string MaxPool2d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}, dilation={}, ceil_mode={}", pair_str(kernel_size),
                     pair_str(stride), pair_str(padding), pair_str(dilation), ceil_mode);
}

AvgPool1d::AvgPool1d(int64_t k, std::optional<int64_t> s, int64_t p, bool ceil, bool include_pad)
    : kernel_size(k), stride(s.value_or(k)), padding(p), ceil_mode(ceil), count_include_pad(include_pad) {
  check_window("AvgPool1d", k, stride, p, 1);
}

Tensor AvgPool1d::forward(const Tensor& x) const {
  check_rank("AvgPool1d", x, 1);
  return in_layer("AvgPool1d", [&] { return avg_pool1d(x, kernel_size, stride, padding, ceil_mode, count_include_pad); });
}

std::string AvgPool1d::extra_repr() const {
  return fmt::format("kernel_size=({},), stride=({},), padding=({},), ceil_mode={}, count_include_pad={}",
                     kernel_size, stride, padding, ceil_mode, count_include_pad);
}

AvgPool2d::AvgPool2d(Size2 k, std::optional<Size2> s, Size2 p, bool ceil, bool include_pad)
    : kernel_size(k), stride(s.value_or(k)), padding(p), ceil_mode(ceil), count_include_pad(include_pad) {
  check_window("AvgPool2d", k.h, stride.h, p.h, 1);
  check_window("AvgPool2d", k.w, stride.w, p.w, 1);
}

Tensor AvgPool2d::forward(const Tensor& x) const {
  check_rank("AvgPool2d", x, 2);
  return in_layer("AvgPool2d", [&] { return avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad); });
}

std::string AvgPool2d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}, ceil_mode={}, count_include_pad={}",
                     pair_str(kernel_size), pair_str(stride), pair_str(padding), ceil_mode, count_include_pad);
}

AdaptiveAvgPool1d::AdaptiveAvgPool1d(int64_t size) : output_size(size) {
  KILN_CHECK(size > 0, "AdaptiveAvgPool1d", "output_size must be positive, got {}", size);
}

Tensor AdaptiveAvgPool1d::forward(const Tensor& x) const {
  check_rank("AdaptiveAvgPool1d", x, 1);
  return in_layer("AdaptiveAvgPool1d", [&] { return adaptive_avg_pool1d(x, output_size); });
}

std::string AdaptiveAvgPool1d::extra_repr() const { return fmt::format("output_size={}", output_size); }

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Size2 size) : output_size(size) {
  KILN_CHECK(size.h > 0 && size.w > 0, "AdaptiveAvgPool2d", "output_size {} must be positive", pair_str(size));
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) const {
  check_rank("AdaptiveAvgPool2d", x, 2);
  return in_layer("AdaptiveAvgPool2d", [&] { return adaptive_avg_pool2d(x, output_size); });
}

std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + pair_str(output_size); }

}  // namespace kiln::nn
