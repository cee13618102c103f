// PNG writing: the file is decoded here by hand (chunk CRCs checked with
// zlib's crc32, IDAT inflated with zlib's uncompress), so every byte of the
// encoder's output is checked against the format, not against itself.
#include "kiln/io/image.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "tests/support/io_testing.h"

namespace kiln::io {
namespace {
using namespace testing;

struct Png {
  uint32_t width = 0, height = 0;
  int colour = -1;
  std::vector<uint8_t> scanlines;  // with their filter bytes
};

uint32_t be32(const std::string& s, size_t at) {
  return uint32_t(uint8_t(s[at])) << 24 | uint32_t(uint8_t(s[at + 1])) << 16 | uint32_t(uint8_t(s[at + 2])) << 8 |
         uint32_t(uint8_t(s[at + 3]));
}

Png decode(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string s((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(s.substr(0, 8), std::string("\x89PNG\r\n\x1a\n"));
  Png png;
  std::string idat;
  std::vector<std::string> types;
  for (size_t at = 8; at + 12 <= s.size();) {
    const uint32_t n = be32(s, at);
    const std::string type = s.substr(at + 4, 4);
    const auto* crc_from = reinterpret_cast<const Bytef*>(s.data() + at + 4);
    EXPECT_EQ(be32(s, at + 8 + n), uint32_t(crc32(0L, crc_from, uInt(4 + n)))) << type;
    const std::string data = s.substr(at + 8, n);
    if (type == "IHDR") {
      png.width = be32(data, 0);
      png.height = be32(data, 4);
      EXPECT_EQ(int(data[8]), 8);  // bit depth
      png.colour = int(data[9]);
    }
    if (type == "IDAT") idat += data;
    types.push_back(type);
    at += 12 + n;
  }
  EXPECT_EQ(types, (std::vector<std::string>{"IHDR", "IDAT", "IEND"}));
  const int channels = png.colour == 0 ? 1 : png.colour == 2 ? 3 : 4;
  uLongf size = png.height * (png.width * channels + 1);
  png.scanlines.resize(size);
  EXPECT_EQ(uncompress(png.scanlines.data(), &size, reinterpret_cast<const Bytef*>(idat.data()), uLong(idat.size())),
            Z_OK);
  EXPECT_EQ(size, png.scanlines.size());
  return png;
}

TEST(Image, SavePngRoundTripsRgbPixels) {
  const std::string path = fresh_dir() + "/rgb.png";
  std::vector<uint8_t> pixels(2 * 3 * 3);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = uint8_t(i * 13);
  save_png(path, pixels, /*height=*/2, /*width=*/3, /*channels=*/3);
  const Png png = decode(path);
  EXPECT_EQ(png.width, 3u);
  EXPECT_EQ(png.height, 2u);
  EXPECT_EQ(png.colour, 2);
  for (size_t y = 0; y < 2; ++y) {
    EXPECT_EQ(png.scanlines[y * 10], 0);  // filter: none
    for (size_t i = 0; i < 9; ++i) EXPECT_EQ(png.scanlines[y * 10 + 1 + i], pixels[y * 9 + i]);
  }
}

TEST(Image, GridTilesImagesWithPaddingAndClamps) {
  // Three 2x2 grey images, two per row, padding 1: a 7-wide, 7-high picture.
  const Tensor images = tensor<float>({0, 0.5f, 1, 2,  //
                                       -1, 0.2f, 0.4f, 0.6f, //
                                       1, 1, 1, 1},
                                      {3, 1, 2, 2});
  const std::string path = fresh_dir() + "/grid.png";
  save_image_grid(path, images, /*nrow=*/2, /*padding=*/1, /*pad_value=*/0.f);
  const Png png = decode(path);
  ASSERT_EQ(png.width, 7u);
  ASSERT_EQ(png.height, 7u);
  EXPECT_EQ(png.colour, 0);
  auto at = [&](int y, int x) { return int(png.scanlines[size_t(y * 8 + 1 + x)]); };
  EXPECT_EQ(at(0, 0), 0);  // padding
  EXPECT_EQ(at(1, 1), 0);
  EXPECT_EQ(at(1, 2), 128);  // round(0.5 * 255)
  EXPECT_EQ(at(2, 1), 255);
  EXPECT_EQ(at(2, 2), 255);  // 2 clamps to 1
  EXPECT_EQ(at(1, 4), 0);    // -1 clamps to 0
  EXPECT_EQ(at(1, 5), 51);   // 0.2
  EXPECT_EQ(at(2, 5), 153);  // 0.6
  EXPECT_EQ(at(4, 1), 255);  // third image, second row
  EXPECT_EQ(at(4, 4), 0);    // empty cell of the second row
}

TEST(Image, BadInputIsAnErrorAndWritesNothing) {
  const std::string dir = fresh_dir();
  EXPECT_THROW(save_image_grid(dir + "/a.png", Tensor::empty({2, 2, 4, 4})), Error);  // 2 channels
  EXPECT_THROW(save_image_grid(dir + "/a.png", Tensor::empty({4, 4})), Error);        // rank 2
  EXPECT_THROW(save_image_grid(dir + "/a.png", Tensor::empty({1, 1, 4, 4}), 0), Error);
  const std::vector<uint8_t> few(5);
  EXPECT_THROW(save_png(dir + "/a.png", few, 2, 2, 1), Error);
  EXPECT_FALSE(std::filesystem::exists(dir + "/a.png"));
  try {
    save_image_grid(dir + "/a.png", Tensor::empty({2, 2, 4, 4}));
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[save_image_grid] images [2, 2, 4, 4] has 2 channels"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiln::io
