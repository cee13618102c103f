// bfloat16: the top 16 bits of an IEEE f32, rounded to nearest even.
#pragma once

#include <cstdint>
#include <cstring>

namespace kiln {

struct bfloat16 {
  uint16_t bits = 0;

  bfloat16() = default;
  bfloat16(float f) : bits(round(f)) {}  // NOLINT: implicit like a float type
  operator float() const {               // NOLINT
    uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }

  static bfloat16 from_bits(uint16_t b) {
    bfloat16 x;
    x.bits = b;
    return x;
  }

 private:
  static uint16_t round(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round half to even
    return uint16_t(u >> 16);
  }
};

}  // namespace kiln
