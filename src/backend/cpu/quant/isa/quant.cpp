// Q8_0 / Q4_0 matrix-vector and small-batch products (contracts in ../quant.h).
//
// Batch 1 on a large matrix is bound by memory: the kernel streams each
// row's codes once, widens each 32-value block to f32 in registers
// (int8 -> int32 -> f32; a Q4 byte's two nibbles minus 8), multiplies it with
// the block of x and adds scale * (that block's dot product) into the row's
// accumulator. For a small batch the decoded block is reused for up to
// kBatchTile inputs before the next block is read. Rows are split across
// threads; each y element is written by one thread, so results do not depend
// on the thread count. (A VNNI path, quantizing x to int8 as ggml does, would
// trade accuracy for compute; on the bandwidth-bound batch-1 product the f32
// decoding already keeps up with memory, docs/model_files.md.)
// Compiled once per kernel ISA; the references are in ../quant_ref.cpp.
#include "src/backend/cpu/quant/isa/quant.h"

#include <immintrin.h>

#include <algorithm>

#include "kiln/core/parallel.h"
#include "src/backend/cpu/quant/quant.h"

namespace kiln::backend::cpu::KILN_ISA_NS {

namespace {

constexpr int64_t kBatchTile = 4;
constexpr int64_t kRowGrain = 16;  // rows per parallel chunk, at least

#if defined(__AVX512F__)
using V = __m512;
constexpr int kLanes = 16;
inline V zero() { return _mm512_setzero_ps(); }
inline V set1(float v) { return _mm512_set1_ps(v); }
inline V loadu(const float* p) { return _mm512_loadu_ps(p); }
inline V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
inline V mul(V a, V b) { return _mm512_mul_ps(a, b); }
inline float hsum(V v) { return _mm512_reduce_add_ps(v); }
/// 32 int8 codes -> 2 vectors.
inline void decode_q8(const int8_t* p, V* w) {
  for (int k = 0; k < 2; ++k)
    w[k] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * k))));
}
/// 16 bytes of nibbles -> 2 vectors: elements 0..15 (low nibbles), 16..31 (high).
inline void decode_q4(const uint8_t* p, V* w) {
  __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  __m512i eight = _mm512_set1_epi32(8), mask = _mm512_set1_epi32(0xf);
  w[0] = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(b, mask), eight));
  w[1] = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(b, 4), eight));
}
#define KILN_QUANT_SIMD 1
#elif defined(__AVX2__) && defined(__FMA__)
using V = __m256;
constexpr int kLanes = 8;
inline V zero() { return _mm256_setzero_ps(); }
inline V set1(float v) { return _mm256_set1_ps(v); }
inline V loadu(const float* p) { return _mm256_loadu_ps(p); }
inline V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
inline V mul(V a, V b) { return _mm256_mul_ps(a, b); }
inline float hsum(V v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline void decode_q8(const int8_t* p, V* w) {
  for (int k = 0; k < 4; ++k)
    w[k] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * k))));
}
inline void decode_q4(const uint8_t* p, V* w) {
  __m256i eight = _mm256_set1_epi32(8), mask = _mm256_set1_epi32(0xf);
  for (int k = 0; k < 2; ++k) {
    __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * k)));
    w[k] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(b, mask), eight));
    w[2 + k] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(b, 4), eight));
  }
}
#define KILN_QUANT_SIMD 1
#endif

#ifdef KILN_QUANT_SIMD
constexpr int kVecs = int(kQuantBlock) / kLanes;  // vectors per block

/// Rows [r0, r1) for the inputs [b0, b0 + nb), nb <= kBatchTile. `decode`
/// turns block `blk` of row r into kVecs vectors.
template <class Decode>
void rows_tile(Decode decode, const float* scales, int64_t r0, int64_t r1, int64_t cols, const float* x,
               int64_t b0, int64_t nb, int64_t rows, float* y) {
  const int64_t nblocks = cols / kQuantBlock;
  for (int64_t r = r0; r < r1; ++r) {
    V acc[kBatchTile];
    for (int64_t k = 0; k < nb; ++k) acc[k] = zero();
    const float* s = scales + r * nblocks;
    for (int64_t blk = 0; blk < nblocks; ++blk) {
      V w[kVecs];
      decode(r, blk, w);
      V scale = set1(s[blk]);
      for (int64_t k = 0; k < nb; ++k) {
        const float* xb = x + (b0 + k) * cols + blk * kQuantBlock;
        V p = mul(w[0], loadu(xb));
        for (int v = 1; v < kVecs; ++v) p = fma(w[v], loadu(xb + v * kLanes), p);
        acc[k] = fma(scale, p, acc[k]);
      }
    }
    for (int64_t k = 0; k < nb; ++k) y[(b0 + k) * rows + r] = hsum(acc[k]);
  }
}

template <class Decode>
void run(Decode decode, const float* scales, int64_t rows, int64_t cols, const float* x, int64_t batch, float* y) {
  parallel_for(0, rows, kRowGrain, [&](int64_t r0, int64_t r1) {
    for (int64_t b0 = 0; b0 < batch; b0 += kBatchTile)
      rows_tile(decode, scales, r0, r1, cols, x, b0, std::min(kBatchTile, batch - b0), rows, y);
  });
}
#endif

}  // namespace

void q8_0_matmul(const int8_t* codes, const float* scales, int64_t rows, int64_t cols, const float* x,
                 int64_t batch, float* y) {
#ifdef KILN_QUANT_SIMD
  run([&](int64_t r, int64_t blk, V* w) { decode_q8(codes + r * cols + blk * kQuantBlock, w); }, scales, rows, cols,
      x, batch, y);
#else
  ref::q8_0_matmul(codes, scales, rows, cols, x, batch, y);
#endif
}

void q4_0_matmul(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, const float* x,
                 int64_t batch, float* y) {
#ifdef KILN_QUANT_SIMD
  run([&](int64_t r, int64_t blk, V* w) { decode_q4(codes + r * (cols / 2) + blk * (kQuantBlock / 2), w); },
      scales, rows, cols, x, batch, y);
#else
  ref::q4_0_matmul(codes, scales, rows, cols, x, batch, y);
#endif
}

}  // namespace kiln::backend::cpu::KILN_ISA_NS
