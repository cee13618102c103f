// Q8_0 / Q4_0 matrix-vector and small-batch products (contracts in ../quant.h).
//
// Integer dot products, as ggml does: each input row x is first quantized per
// 32-value block (the same blocks as the weights) to integers with its own f32
// scale dx[b], so a block's dot product is one integer sum scaled once:
//   y[r] = sum_b  dw[r, b] * dx[b] * sum_j qw[r, b, j] * qx[b, j]
//   Q4_0: x to int8 (dx = max|x_b| / 127); the weights' nibbles u in 0..15
//         stand for u - 8, so the sum is  sum_j u * qx - 8 * sum_j qx: the
//         second term is computed once per input block (`negcorr` below) and
//         starts the integer accumulator. u8 x s8 products: vpdpbusd where the
//         CPU has AVX512-VNNI (chosen at run time, ../quant.cpp), else
//         vpmaddubsw + vpmaddwd (AVX2 / AVX512-BW).
//   Q8_0: x to int16 (dx = max|x_b| / 32767): int8 codes widened to int16,
//         vpmaddwd. An int8 x (ggml's Q8_0 x Q8_0) would add an error as large
//         as the weights' own (about 0.005 relative RMS each): Q8's 0.007
//         target would not hold; int16 costs the same instructions here.
// The integer sums are exact; x's rounding is the only difference from
// ref::q*_matmul (bounded by tests/nn/quantized_test.cpp: each |x - qx dx| <=
// dx / 2). Batch 1 on a large matrix is bound by memory: one core running
// these kernels consumes codes about as fast as the memory delivers them (the
// f32-decoding kernels they replace managed a third of that;
// docs/model_files.md, Speed).
//
// Rows go in tiles of kTileRows sharing each loaded block of x (in L1); the
// inputs of a small batch reuse the tile's codes from cache. Tiles are split
// across threads; each y element is written by one thread, so results do not
// depend on the thread count.
// Compiled once per kernel ISA; the references are in ../quant_ref.cpp.
#include "src/backend/cpu/quant/isa/quant.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kiln/core/parallel.h"
#include "src/backend/cpu/quant/quant.h"

namespace kiln::backend::cpu::KILN_ISA_NS {

namespace {

constexpr int kTileRows = 4;
constexpr int64_t kTileGrain = 4;  // tiles per parallel chunk, at least

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define KILN_QUANT_SIMD 512
constexpr int64_t kGroup = 4;  // Q4 blocks per vector: 64 code bytes
#elif defined(__AVX2__) && defined(__FMA__)
#define KILN_QUANT_SIMD 256
constexpr int64_t kGroup = 2;  // 32 code bytes
#endif

#ifdef KILN_QUANT_SIMD

// ---- inputs quantized per block ---------------------------------------------

/// One input row of a Q4 product: x to int8, laid out to match a vector of
/// kGroup blocks' code bytes. Group g (blocks kGroup g ...) holds
///   qx      [2][16 kGroup] int8: the low halves (elements 0..15) of each block,
///           then the high halves (16..31), block after block: byte i of a code
///           vector's low nibbles meets qx[0][i], its high nibbles qx[1][i]
///   negcorr [4 kGroup] int32: -2 * sum_j qx[b, j] in each of block b's 4 lanes
///           (the dot product's int32 lanes 4k..4k+3 belong to block k of the
///           group; their sum then carries -8 * sum_j qx, the nibbles' offset)
///   dx      [4 kGroup] f32: dx[b] in block b's 4 lanes
/// Blocks past the row's end are zero (so are their products).
struct Q4Input {
  std::vector<int8_t> qx;
  std::vector<int32_t> negcorr;
  std::vector<float> dx;
};

/// Per block of 32: d = max|x| / q_max, q = round(x / d) (ties away from
/// zero). Returns d; writes q through put(j, q).
template <class Put>
float quantize_block(const float* x, float q_max, Put put) {
  float amax = 0.0f;
  for (int64_t j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
  // x / d, not x * (1 / d): a block of subnormals has a d whose reciprocal
  // overflows. Such a d is coarse (a few bits): raised until no |x| / d
  // exceeds q_max, so nothing is clipped (the error stays below d / 2).
  float d = amax / q_max;
  while (d != 0.0f && d < std::numeric_limits<float>::min() && amax / d > q_max + 0.5f)
    d = std::nextafter(d, std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < kQuantBlock; ++j)
    put(j, d != 0.0f ? int32_t(std::clamp(std::round(x[j] / d), -q_max, q_max)) : 0);
  return d;
}

void quantize_q4_input(const float* x, int64_t cols, Q4Input& in) {
  const int64_t nblocks = cols / kQuantBlock, ngroups = (nblocks + kGroup - 1) / kGroup;
  in.qx.assign(size_t(ngroups * 32 * kGroup), 0);
  in.negcorr.assign(size_t(ngroups * 4 * kGroup), 0);
  in.dx.assign(size_t(ngroups * 4 * kGroup), 0.0f);
  for (int64_t b = 0; b < nblocks; ++b) {
    const int64_t g = b / kGroup, k = b % kGroup;
    int8_t* lo = in.qx.data() + g * 32 * kGroup + 16 * k;
    int8_t* hi = lo + 16 * kGroup;
    int32_t sum = 0;
    const float d = quantize_block(x + b * kQuantBlock, 127.0f, [&](int64_t j, int32_t q) {
      (j < 16 ? lo[j] : hi[j - 16]) = int8_t(q);
      sum += q;
    });
    for (int64_t l = 0; l < 4; ++l) {
      in.negcorr[size_t(g * 4 * kGroup + 4 * k + l)] = -2 * sum;
      in.dx[size_t(g * 4 * kGroup + 4 * k + l)] = d;
    }
  }
}

/// One input row of a Q8 product: x to int16 [cols] (natural order), dx [cols / 32].
struct Q8Input {
  std::vector<int16_t> qx;
  std::vector<float> dx;
};

void quantize_q8_input(const float* x, int64_t cols, Q8Input& in) {
  const int64_t nblocks = cols / kQuantBlock;
  in.qx.resize(size_t(cols));
  in.dx.resize(size_t(nblocks));
  for (int64_t b = 0; b < nblocks; ++b)
    in.dx[size_t(b)] = quantize_block(x + b * kQuantBlock, 32767.0f,
                                      [&](int64_t j, int32_t q) { in.qx[size_t(b * kQuantBlock + j)] = int16_t(q); });
}

// ---- vector helpers -----------------------------------------------------------

#if KILN_QUANT_SIMD == 512
using VF = __m512;
using VI = __m512i;
inline VF zero() { return _mm512_setzero_ps(); }
inline VF set1(float v) { return _mm512_set1_ps(v); }
inline float hsum(VF v) { return _mm512_reduce_add_ps(v); }
inline VF fma(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
inline VF mul(VF a, VF b) { return _mm512_mul_ps(a, b); }
inline VF cvt(VI v) { return _mm512_cvtepi32_ps(v); }
inline VF loadf(const float* p) { return _mm512_loadu_ps(p); }
inline VI loadi(const void* p) { return _mm512_loadu_si512(p); }

/// A group's kGroup code vectors' bytes (all of them, or the first `nb` blocks' with the rest zero).
inline VI load_codes(const uint8_t* p) { return _mm512_loadu_si512(p); }
inline VI load_codes(const uint8_t* p, int64_t nb) {
  return _mm512_maskz_loadu_epi8(__mmask64((uint64_t(1) << (16 * nb)) - 1), p);
}
/// The weights' scales of a group's blocks, each repeated in its 4 lanes.
inline VF expand_scales(__m128 s) {
  const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(s));
}
inline VF load_scales(const float* p) { return expand_scales(_mm_loadu_ps(p)); }
inline VF load_scales(const float* p, int64_t nb) { return expand_scales(_mm_maskz_loadu_ps(__mmask8((1u << nb) - 1), p)); }

/// int32 lanes: acc + the sums of 4 adjacent u8 x s8 products of (u0, s0)
/// and of (u1, s1) (the low and high nibbles'); their int16 pair sums (at
/// most 2 * 15 * 127 each) are added before widening.
inline VI dot2_u8s8(VI acc, VI u0, VI s0, VI u1, VI s1) {
  const VI ones = _mm512_set1_epi16(1);
  VI p = _mm512_add_epi16(_mm512_maddubs_epi16(u0, s0), _mm512_maddubs_epi16(u1, s1));
  return _mm512_add_epi32(acc, _mm512_madd_epi16(p, ones));
}
inline VI nibbles_lo(VI c) { return _mm512_and_si512(c, _mm512_set1_epi8(0x0f)); }
inline VI nibbles_hi(VI c) { return _mm512_and_si512(_mm512_srli_epi16(c, 4), _mm512_set1_epi8(0x0f)); }

/// Q8 block: 32 int8 codes times 32 int16 inputs -> 16 int32 lanes.
inline VI q8_block_dot(const int8_t* codes, const int16_t* qx) {
  VI w = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes)));
  return _mm512_madd_epi16(w, _mm512_loadu_si512(qx));
}
#else
using VF = __m256;
using VI = __m256i;
inline VF zero() { return _mm256_setzero_ps(); }
inline VF set1(float v) { return _mm256_set1_ps(v); }
inline float hsum(VF v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline VF fma(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
inline VF mul(VF a, VF b) { return _mm256_mul_ps(a, b); }
inline VF cvt(VI v) { return _mm256_cvtepi32_ps(v); }
inline VF loadf(const float* p) { return _mm256_loadu_ps(p); }
inline VI loadi(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

inline VI load_codes(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline VI load_codes(const uint8_t* p, int64_t) {  // the one block of a group of 2
  return _mm256_inserti128_si256(_mm256_setzero_si256(), _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), 0);
}
inline VF expand_scales(__m128 s) {
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(s), _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
}
inline VF load_scales(const float* p) {
  return expand_scales(_mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(p))));
}
inline VF load_scales(const float* p, int64_t) { return expand_scales(_mm_load_ss(p)); }

inline VI dot2_u8s8(VI acc, VI u0, VI s0, VI u1, VI s1) {
  const VI ones = _mm256_set1_epi16(1);
  VI p = _mm256_add_epi16(_mm256_maddubs_epi16(u0, s0), _mm256_maddubs_epi16(u1, s1));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p, ones));
}
inline VI nibbles_lo(VI c) { return _mm256_and_si256(c, _mm256_set1_epi8(0x0f)); }
inline VI nibbles_hi(VI c) { return _mm256_and_si256(_mm256_srli_epi16(c, 4), _mm256_set1_epi8(0x0f)); }

inline VI q8_block_dot(const int8_t* codes, const int16_t* qx) {
  const auto* c = reinterpret_cast<const __m128i*>(codes);
  const auto* x = reinterpret_cast<const __m256i*>(qx);
  VI w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(c)), w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(c + 1));
  return _mm256_add_epi32(_mm256_madd_epi16(w0, _mm256_loadu_si256(x)), _mm256_madd_epi16(w1, _mm256_loadu_si256(x + 1)));
}
#endif

// ---- Q4_0 ---------------------------------------------------------------------

#if KILN_QUANT_SIMD == 512 && defined(__AVX512VNNI__)
#define KILN_QUANT_VNNI 1
/// acc + the low and high nibbles' products, on vpdpbusd.
inline VI dot2_vnni(VI acc, VI u0, VI s0, VI u1, VI s1) {
  return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc, u0, s0), u1, s1);
}
#endif

/// One group of kGroup blocks (or the first `nb` of them: Tail) of NR rows.
template <int NR, bool Vnni, bool Tail>
inline void q4_group(const uint8_t* const* codes, const float* const* scales, const Q4Input& in, int64_t g,
                     int64_t nb, VF* acc) {
  const VI xlo = loadi(in.qx.data() + g * 32 * kGroup), xhi = loadi(in.qx.data() + g * 32 * kGroup + 16 * kGroup);
  const VI corr = loadi(in.negcorr.data() + g * 4 * kGroup);
  const VF dx = loadf(in.dx.data() + g * 4 * kGroup);
  for (int r = 0; r < NR; ++r) {
    const uint8_t* c = codes[r] + g * 16 * kGroup;
    VI w = Tail ? load_codes(c, nb) : load_codes(c);
    VI lo = nibbles_lo(w), hi = nibbles_hi(w), d;
#ifdef KILN_QUANT_VNNI
    if constexpr (Vnni)
      d = dot2_vnni(corr, lo, xlo, hi, xhi);
    else
#endif
      d = dot2_u8s8(corr, lo, xlo, hi, xhi);
    const float* s = scales[r] + g * kGroup;
    VF sw = Tail ? load_scales(s, nb) : load_scales(s);
    acc[r] = fma(mul(cvt(d), dx), sw, acc[r]);
  }
}

/// Rows [r0, r0 + NR) times every input.
template <int NR, bool Vnni>
void q4_tile(const uint8_t* codes, const float* scales, int64_t r0, int64_t cols, const std::vector<Q4Input>& inputs,
             int64_t rows, float* y) {
  const int64_t nblocks = cols / kQuantBlock, full = nblocks / kGroup, rest = nblocks % kGroup;
  const uint8_t* c[NR];
  const float* s[NR];
  for (int r = 0; r < NR; ++r) {
    c[r] = codes + (r0 + r) * (cols / 2);
    s[r] = scales + (r0 + r) * nblocks;
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    VF acc[NR];
    for (int r = 0; r < NR; ++r) acc[r] = zero();
    for (int64_t g = 0; g < full; ++g) q4_group<NR, Vnni, false>(c, s, inputs[k], g, kGroup, acc);
    if (rest) q4_group<NR, Vnni, true>(c, s, inputs[k], full, rest, acc);
    for (int r = 0; r < NR; ++r) y[int64_t(k) * rows + r0 + r] = hsum(acc[r]);
  }
}

// ---- Q8_0 ---------------------------------------------------------------------

template <int NR>
void q8_tile(const int8_t* codes, const float* scales, int64_t r0, int64_t cols, const std::vector<Q8Input>& inputs,
             int64_t rows, float* y) {
  const int64_t nblocks = cols / kQuantBlock;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Q8Input& in = inputs[k];
    VF acc[NR];
    for (int r = 0; r < NR; ++r) acc[r] = zero();
    for (int64_t b = 0; b < nblocks; ++b) {
      const int16_t* xb = in.qx.data() + b * kQuantBlock;
      // (dot * dx) * dw: dx * dw alone can underflow (x subnormal: dx ~ 1e-45).
      const VF dx = set1(in.dx[size_t(b)]);
      for (int r = 0; r < NR; ++r) {
        VI d = q8_block_dot(codes + (r0 + r) * cols + b * kQuantBlock, xb);
        acc[r] = fma(mul(cvt(d), dx), set1(scales[(r0 + r) * nblocks + b]), acc[r]);
      }
    }
    for (int r = 0; r < NR; ++r) y[int64_t(k) * rows + r0 + r] = hsum(acc[r]);
  }
}

/// Whether every x is finite: the integer kernels cannot carry a NaN or an
/// infinity (the reference, which propagates them as f32 would, runs instead).
bool all_finite(const float* x, int64_t n) {
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) ok &= std::isfinite(x[i]);
  return ok;
}

/// Tiles of kTileRows rows in parallel; the last tile may be shorter.
template <class Tile>
void over_tiles(int64_t rows, Tile tile) {
  const int64_t ntiles = (rows + kTileRows - 1) / kTileRows;
  parallel_for(0, ntiles, kTileGrain, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r0 = t * kTileRows;
      switch (std::min<int64_t>(kTileRows, rows - r0)) {
        case 4: tile(std::integral_constant<int, 4>{}, r0); break;
        case 3: tile(std::integral_constant<int, 3>{}, r0); break;
        case 2: tile(std::integral_constant<int, 2>{}, r0); break;
        default: tile(std::integral_constant<int, 1>{}, r0); break;
      }
    }
  });
}
#endif  // KILN_QUANT_SIMD

}  // namespace

void q8_0_matmul(const int8_t* codes, const float* scales, int64_t rows, int64_t cols, const float* x,
                 int64_t batch, float* y) {
#ifdef KILN_QUANT_SIMD
  if (!all_finite(x, batch * cols)) return ref::q8_0_matmul(codes, scales, rows, cols, x, batch, y);
  std::vector<Q8Input> inputs(static_cast<size_t>(batch));
  for (int64_t k = 0; k < batch; ++k) quantize_q8_input(x + k * cols, cols, inputs[size_t(k)]);
  over_tiles(rows, [&](auto nr, int64_t r0) { q8_tile<decltype(nr)::value>(codes, scales, r0, cols, inputs, rows, y); });
#else
  ref::q8_0_matmul(codes, scales, rows, cols, x, batch, y);
#endif
}

void q4_0_matmul(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, const float* x,
                 int64_t batch, float* y, bool vnni) {
#ifdef KILN_QUANT_SIMD
  if (!all_finite(x, batch * cols)) return ref::q4_0_matmul(codes, scales, rows, cols, x, batch, y);
  std::vector<Q4Input> inputs(static_cast<size_t>(batch));
  for (int64_t k = 0; k < batch; ++k) quantize_q4_input(x + k * cols, cols, inputs[size_t(k)]);
#ifdef KILN_QUANT_VNNI
  if (vnni) {
    over_tiles(rows, [&](auto nr, int64_t r0) {
      q4_tile<decltype(nr)::value, true>(codes, scales, r0, cols, inputs, rows, y);
    });
    return;
  }
#endif
  (void)vnni;
  over_tiles(rows, [&](auto nr, int64_t r0) {
    q4_tile<decltype(nr)::value, false>(codes, scales, r0, cols, inputs, rows, y);
  });
#else
  (void)vnni;
  ref::q4_0_matmul(codes, scales, rows, cols, x, batch, y);
#endif
}

bool q4_0_vnni_compiled() {
#ifdef KILN_QUANT_VNNI
  return true;
#else
  return false;
#endif
}

}  // namespace kiln::backend::cpu::KILN_ISA_NS
