// Q8_0 / Q4_0 block quantization (ggml's formats, kiln's layout) and the
// quantized matrix products (docs/model_files.md).
//
// A row of `cols` values (cols % 32 == 0) is cut into blocks of 32. kiln keeps
// a quantized matrix [rows, cols] as two planes:
//   codes   q8_0: int8 [rows, cols], value = code * scale
//           q4_0: uint8 [rows, cols / 2]; in block b of a row, byte j holds
//                 element 32b + j in its low nibble and element 32b + 16 + j in
//                 its high nibble (ggml's order); value = (nibble - 8) * scale
//   scales  f32 [rows, cols / 32], each exactly an IEEE half (ggml stores it as
//           one, so a GGUF file round-trips without loss)
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace kiln::backend::cpu {

inline constexpr int64_t kQuantBlock = 32;

/// IEEE binary16 bits -> float (exact).
inline float fp16_to_fp32(uint16_t h) {
  uint32_t sign = uint32_t(h >> 15) << 31;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0) {
    float f = std::ldexp(float(mant), -24);
    return sign ? -f : f;
  }
  uint32_t bits = exp == 31 ? (sign | 0x7f800000u | (mant << 13)) : (sign | ((exp - 15 + 127) << 23) | (mant << 13));
  return std::bit_cast<float>(bits);
}

/// float -> IEEE binary16 bits, rounding to nearest even (as F16C and ggml's
/// fallback do); overflow gives infinity, NaN stays NaN.
inline uint16_t fp32_to_fp16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint16_t sign = uint16_t((x >> 16) & 0x8000);
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0);
  if (ax >= 0x477ff000u) return sign | 0x7c00;  // >= 65520 rounds to infinity
  if (ax < 0x38800000u) {                        // below 2^-14: a subnormal half (or the smallest normal)
    float scaled = std::bit_cast<float>(ax) * 16777216.0f;  // exact: times 2^24
    return sign | uint16_t(std::nearbyint(scaled));         // ties to even (the default rounding mode)
  }
  uint32_t h = ((((ax >> 23) - 127 + 15)) << 10) | ((ax & 0x7fffffu) >> 13);
  uint32_t rest = ax & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) ++h;  // may carry into the exponent: still right
  return sign | uint16_t(h);
}

// Quantizers of ggml's reference (quantize_row_q8_0_ref / _q4_0_ref), one row
// of n values (n % 32 == 0): codes as described above, scales n / 32 floats.
void quantize_row_q8_0(const float* x, int64_t n, int8_t* codes, float* scales);
void quantize_row_q4_0(const float* x, int64_t n, uint8_t* codes, float* scales);
void dequantize_row_q8_0(const int8_t* codes, const float* scales, int64_t n, float* out);
void dequantize_row_q4_0(const uint8_t* codes, const float* scales, int64_t n, float* out);

/// y[b, r] = sum_c W[r, c] * x[b, c] for b < batch, W quantized [rows, cols]
/// (codes/scales as above), x [batch, cols] and y [batch, rows] contiguous.
/// Chooses the kernel ISA at run time; parallel over rows. The kernels
/// quantize each x row per 32-block first (int8 for Q4_0, int16 for Q8_0) and
/// take integer dot products (isa/quant.cpp): y differs from ref:: by x's
/// rounding only, |x - x'| <= max|x_block| / 254 (Q4) or / 65534 (Q8) (for a
/// block of subnormals up to twice that). An x with a NaN or an infinity runs
/// the reference (it reaches y as in f32).
void q8_0_matmul(const int8_t* codes, const float* scales, int64_t rows, int64_t cols, const float* x,
                 int64_t batch, float* y);
void q4_0_matmul(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, const float* x,
                 int64_t batch, float* y);

/// Whether q4_0_matmul runs on vpdpbusd: the AVX-512 kernels are in use, the
/// build's baseline has AVX512-VNNI and cpuid reports avx512_vnni (checked
/// at run time, so a binary never runs it on a CPU without).
bool q4_0_uses_vnni();
/// The quantized products' kernel in use: "avx512-vnni", "avx512" or "avx2".
const char* quant_kernel_name();

namespace detail {
/// Tests only: forbid (false) or allow again (true) the VNNI path, so both
/// AVX-512 variants can be checked on a VNNI CPU; returns the previous setting.
bool set_quant_vnni_allowed(bool allowed);
}  // namespace detail

namespace ref {
/// The plain loops the fast kernels are tested against (f64 accumulation).
void q8_0_matmul(const int8_t* codes, const float* scales, int64_t rows, int64_t cols, const float* x,
                 int64_t batch, float* y);
void q4_0_matmul(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, const float* x,
                 int64_t batch, float* y);
}  // namespace ref

}  // namespace kiln::backend::cpu
