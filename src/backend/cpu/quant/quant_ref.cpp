// The quantizers (ggml's reference rounding) and the reference quantized
// products (src/backend/cpu/quant/quant.h).
#include <algorithm>
#include <cmath>

#include "src/backend/cpu/quant/quant.h"

namespace kiln::backend::cpu {

// Both quantizers follow ggml-quants.c's reference functions operation for
// operation in f32 (kiln_backend builds with -std=c++20: no contraction into
// fused multiply-adds), so codes match ggml's and tools/goldens/ggml_quant.py's
// byte for byte. The scale kept is the half that ggml stores.
void quantize_row_q8_0(const float* x, int64_t n, int8_t* codes, float* scales) {
  for (int64_t b = 0; b < n / kQuantBlock; ++b) {
    const float* xb = x + b * kQuantBlock;
    float amax = 0.0f;
    for (int64_t j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(xb[j]));
    float d = amax / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    scales[b] = fp16_to_fp32(fp32_to_fp16(d));
    for (int64_t j = 0; j < kQuantBlock; ++j) codes[b * kQuantBlock + j] = int8_t(std::round(xb[j] * id));
  }
}

void quantize_row_q4_0(const float* x, int64_t n, uint8_t* codes, float* scales) {
  for (int64_t b = 0; b < n / kQuantBlock; ++b) {
    const float* xb = x + b * kQuantBlock;
    float amax = 0.0f, max = 0.0f;  // the value of largest magnitude, with its sign (the first such)
    for (int64_t j = 0; j < kQuantBlock; ++j)
      if (amax < std::fabs(xb[j])) {
        amax = std::fabs(xb[j]);
        max = xb[j];
      }
    float d = max / -8.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    scales[b] = fp16_to_fp32(fp32_to_fp16(d));
    for (int64_t j = 0; j < kQuantBlock / 2; ++j) {
      float x0 = xb[j] * id, x1 = xb[kQuantBlock / 2 + j] * id;
      int q0 = std::min(15, int(int8_t(x0 + 8.5f))), q1 = std::min(15, int(int8_t(x1 + 8.5f)));
      codes[b * kQuantBlock / 2 + j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

void dequantize_row_q8_0(const int8_t* codes, const float* scales, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = float(codes[i]) * scales[i / kQuantBlock];
}

void dequantize_row_q4_0(const uint8_t* codes, const float* scales, int64_t n, float* out) {
  for (int64_t b = 0; b < n / kQuantBlock; ++b)
    for (int64_t j = 0; j < kQuantBlock / 2; ++j) {
      uint8_t v = codes[b * kQuantBlock / 2 + j];
      out[b * kQuantBlock + j] = float(int(v & 0xf) - 8) * scales[b];
      out[b * kQuantBlock + kQuantBlock / 2 + j] = float(int(v >> 4) - 8) * scales[b];
    }
}

namespace ref {

void q8_0_matmul(const int8_t* codes, const float* scales, int64_t rows, int64_t cols, const float* x,
                 int64_t batch, float* y) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0;
      for (int64_t c = 0; c < cols; ++c)
        acc += double(codes[r * cols + c]) * double(scales[r * (cols / kQuantBlock) + c / kQuantBlock]) *
               double(x[b * cols + c]);
      y[b * rows + r] = float(acc);
    }
}

void q4_0_matmul(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, const float* x,
                 int64_t batch, float* y) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0;
      for (int64_t c = 0; c < cols; ++c) {
        int64_t blk = c / kQuantBlock, j = c % kQuantBlock;
        uint8_t v = codes[r * cols / 2 + blk * kQuantBlock / 2 + j % (kQuantBlock / 2)];
        int q = (j < kQuantBlock / 2 ? (v & 0xf) : (v >> 4)) - 8;
        acc += double(q) * double(scales[r * (cols / kQuantBlock) + blk]) * double(x[b * cols + c]);
      }
      y[b * rows + r] = float(acc);
    }
}

}  // namespace ref
}  // namespace kiln::backend::cpu
