// PNG encoding (RFC 2083 / ISO 15948): signature, IHDR, one zlib-compressed
// IDAT of filter-0 scanlines, IEND; each chunk carries a CRC-32 of its type
// and data (zlib's crc32 is that CRC).
#include "kiln/io/image.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kiln/core/atomic_file.h"
#include "kiln/core/error.h"
#include "kiln/core/shape.h"

namespace kiln::io {
namespace {

void put_u32(std::string& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(char((v >> s) & 0xff));
}

void put_chunk(std::string& out, const char type[4], const std::string& data) {
  put_u32(out, uint32_t(data.size()));
  const size_t start = out.size();
  out.append(type, 4);
  out += data;
  const auto* bytes = reinterpret_cast<const Bytef*>(out.data() + start);
  put_u32(out, uint32_t(crc32(0L, bytes, uInt(out.size() - start))));
}

}  // namespace

void save_png(const std::string& path, std::span<const uint8_t> pixels, int64_t height, int64_t width,
              int64_t channels) {
  static constexpr char kOp[] = "save_png";
  KILN_CHECK(height > 0 && width > 0 && height < (int64_t(1) << 31) && width < (int64_t(1) << 31), kOp,
             "{}: size {}x{} must be positive and below 2^31", path, height, width);
  KILN_CHECK(channels == 1 || channels == 3 || channels == 4, kOp, "{}: channels is {}; expected 1, 3 or 4",
             path, channels);
  const int64_t row = width * channels;
  KILN_CHECK(int64_t(pixels.size()) == height * row, kOp, "{}: {} bytes of pixels for [{}, {}, {}] (expected {})",
             path, pixels.size(), height, width, channels, height * row);

  // Scanlines, each led by its filter type (0: none).
  std::string raw;
  raw.reserve(size_t(height * (row + 1)));
  for (int64_t y = 0; y < height; ++y) {
    raw.push_back('\0');
    raw.append(reinterpret_cast<const char*>(pixels.data() + y * row), size_t(row));
  }
  uLongf packed_size = compressBound(uLong(raw.size()));
  std::string packed(packed_size, '\0');
  const int rc = compress2(reinterpret_cast<Bytef*>(packed.data()), &packed_size,
                           reinterpret_cast<const Bytef*>(raw.data()), uLong(raw.size()), 6);
  KILN_CHECK(rc == Z_OK, kOp, "{}: zlib compress2 failed ({})", path, rc);
  packed.resize(packed_size);

  std::string header;
  put_u32(header, uint32_t(width));
  put_u32(header, uint32_t(height));
  header.push_back(char(8));                                                    // bit depth
  header.push_back(char(channels == 1 ? 0 : channels == 3 ? 2 : 6));          // colour type
  header.append(3, '\0');                                                       // deflate, filter 0, no interlace

  std::string file = "\x89PNG\r\n\x1a\n";
  put_chunk(file, "IHDR", header);
  put_chunk(file, "IDAT", packed);
  put_chunk(file, "IEND", {});
  atomic_write(kOp, path, file);
}

void save_image_grid(const std::string& path, const Tensor& images, int64_t nrow, int64_t padding,
                     float pad_value) {
  static constexpr char kOp[] = "save_image_grid";
  KILN_CHECK(images.dim() == 4, kOp, "images must be [N, C, H, W], got {}", to_string(images.shape()));
  KILN_CHECK(images.dtype() == kF32 || images.dtype() == kF64, kOp, "images must be f32 or f64, got {}",
             name(images.dtype()));
  const int64_t n = images.size(0), c = images.size(1), h = images.size(2), w = images.size(3);
  KILN_CHECK(n > 0 && h > 0 && w > 0, kOp, "images {} is empty", to_string(images.shape()));
  KILN_CHECK(c == 1 || c == 3, kOp, "images {} has {} channels; expected 1 or 3", to_string(images.shape()), c);
  KILN_CHECK(nrow > 0 && padding >= 0, kOp, "nrow {} must be positive and padding {} non-negative", nrow, padding);

  const std::vector<double> v = images.to_vector<double>();
  const int64_t cols = std::min(nrow, n), rows = (n + cols - 1) / cols;
  const int64_t height = rows * (h + padding) + padding, width = cols * (w + padding) + padding;
  auto to_byte = [](double x) {
    if (!(x > 0)) return uint8_t(0);  // NaN too
    return uint8_t(std::lround(std::min(x, 1.0) * 255.0));
  };
  std::vector<uint8_t> pixels(size_t(height * width * c), to_byte(pad_value));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t top = (i / cols) * (h + padding) + padding, left = (i % cols) * (w + padding) + padding;
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x)
          pixels[size_t(((top + y) * width + left + x) * c + ch)] = to_byte(v[size_t(((i * c + ch) * h + y) * w + x)]);
  }
  save_png(path, pixels, height, width, c);
}

}  // namespace kiln::io
