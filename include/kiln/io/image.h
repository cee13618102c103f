// PNG images: a batch of images as one grid picture (torchvision's
// save_image), for the sample and reconstruction grids the generative jobs
// write after each epoch. Written atomically (core/atomic_file.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "kiln/core/tensor.h"

namespace kiln::io {

/// Writes 8-bit pixels [height, width, channels] (row-major, channels 1 =
/// grey, 3 = RGB, 4 = RGBA) as a PNG file.
void save_png(const std::string& path, std::span<const uint8_t> pixels, int64_t height, int64_t width,
              int64_t channels);

/// Tiles `images` [N, C, H, W] (f32 or f64, C 1 or 3, values in [0, 1];
/// outside is clamped, NaN is black) into a grid of `nrow` images per row
/// with `padding` pixels of `pad_value` between and around them, as
/// torchvision.utils.save_image does, and writes it as a PNG. Pixel value
/// is round(v * 255).
///   io::save_image_grid("samples.png", images, /*nrow=*/10);
void save_image_grid(const std::string& path, const Tensor& images, int64_t nrow = 8, int64_t padding = 2,
                     float pad_value = 0.f);

}  // namespace kiln::io
