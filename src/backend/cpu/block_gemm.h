// Register-tiled products of small blocks held in L1/L2: the chunked Mamba-3
// scan's (ssm/isa/ssm_chunked.cpp: a chunk's length L, the state size N, the
// head dim P), the small-sequence attention's (attention/isa/
// small_attention.cpp: <= 64 tokens of one head) and flash attention's tiles
// (nn/isa/attention.cpp: key blocks, query-row tiles, padded head dims). Included only by files of
// an isa/ folder (KILN_ISA_NS set), so each kernel copy gets the register
// width of its ISA: zmm (16 f32 / 8 f64 lanes, 32 registers) in the AVX-512
// copy, ymm (8 / 4 lanes, 16 registers) in the AVX2 copy.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

namespace kiln::backend::cpu::KILN_ISA_NS::block {

#ifdef __AVX512F__
constexpr int kVecBytes = 64;
constexpr int kVecRegs = 32;
#else
constexpr int kVecBytes = 32;
constexpr int kVecRegs = 16;
#endif

// One vector register of A (GCC/Clang vector extension: + and * are one
// instruction each).
template <class A>
struct Vec {
  typedef A type __attribute__((vector_size(kVecBytes)));
  static constexpr int W = kVecBytes / int(sizeof(A));
};

/// n rounded up to whole vectors of A: the padded row length of every block.
template <class A>
constexpr int64_t padded(int64_t n) {
  constexpr int64_t W = Vec<A>::W;
  return (n + W - 1) / W * W;
}

// C[r][0, NV W) (+)= sum_k a(r, k) b[k][0, NV W) for r < RM, with the RM x NV
// accumulators held in registers while k runs (a(r, k) = a[r*sam + k*sak]).
template <class A, int RM, int NV, bool Acc>
inline void tile(int64_t K, const A* a, int64_t sam, int64_t sak, const A* b, int64_t ldb, A* c, int64_t ldc) {
  using V = typename Vec<A>::type;
  constexpr int W = Vec<A>::W;
  V acc[RM][NV];
  for (int r = 0; r < RM; ++r)
    for (int v = 0; v < NV; ++v) {
      if constexpr (Acc) std::memcpy(&acc[r][v], c + r * ldc + v * W, sizeof(V));
      else acc[r][v] = V{};
    }
  for (int64_t k = 0; k < K; ++k) {
    V bv[NV];
    for (int v = 0; v < NV; ++v) std::memcpy(&bv[v], b + k * ldb + v * W, sizeof(V));
    for (int r = 0; r < RM; ++r) {
      const A s = a[r * sam + k * sak];
      for (int v = 0; v < NV; ++v) acc[r][v] += s * bv[v];
    }
  }
  for (int r = 0; r < RM; ++r)
    for (int v = 0; v < NV; ++v) std::memcpy(c + r * ldc + v * W, &acc[r][v], sizeof(V));
}

// Columns [0, NV W) of every row of C, RM rows at a time (RM x NV
// accumulators + NV loads of b + one broadcast fit the register file).
template <class A, int NV, bool Acc>
inline void columns(int64_t M, int64_t K, const A* a, int64_t sam, int64_t sak, const A* b, int64_t ldb, A* c,
                    int64_t ldc) {
  constexpr int RM = kVecRegs == 32 ? (NV <= 2 ? 8 : 4) : (NV == 1 ? 12 : NV == 2 ? 6 : 2);
  int64_t m = 0;
  for (; m + RM <= M; m += RM) tile<A, RM, NV, Acc>(K, a + m * sam, sam, sak, b, ldb, c + m * ldc, ldc);
  for (; m < M; ++m) tile<A, 1, NV, Acc>(K, a + m * sam, sam, sak, b, ldb, c + m * ldc, ldc);
}

/// C [M, Nc] (+ when Acc)= A [M, K] @ B [K, Nc]: A's element (m, k) at
/// a[m*sam + k*sak] (so A or its transpose, read in place), B row-major with
/// leading dim ldb, C with ldc; Nc a multiple of the vector width (padded()).
/// Columns of C at or past the real width only hold what B's padding gives.
template <class A, bool Acc>
void gemm(int64_t M, int64_t Nc, int64_t K, const A* a, int64_t sam, int64_t sak, const A* b, int64_t ldb, A* c,
          int64_t ldc) {
  constexpr int64_t W = Vec<A>::W;
  int64_t n = 0;
  for (; n + 2 * W <= Nc; n += 2 * W) columns<A, 2, Acc>(M, K, a, sam, sak, b + n, ldb, c + n, ldc);
  if (n < Nc) columns<A, 1, Acc>(M, K, a, sam, sak, b + n, ldb, c + n, ldc);
}

/// C [M, N] (+ when Acc)= A [M, K] @ B [K, N] as gemm<A, Acc>, but sweeping
/// the columns in the widest tiles the register file holds (4 vectors on
/// AVX-512, 2 on AVX2; then 3, 2 or 1 for the rest): for N of a few vectors
/// (an attention head's 32-64 columns, a key block), where gemm's 2-vector
/// sweep leaves registers idle. The same sums in the same order per element
/// as gemm: only the tiling differs.
template <class A, bool Acc = false>
void gemm_wide(int64_t M, int64_t N, int64_t K, const A* a, int64_t sam, int64_t sak, const A* b, int64_t ldb, A* c,
               int64_t ldc) {
  constexpr int64_t W = Vec<A>::W;
  constexpr int kWide = kVecRegs == 32 ? 4 : 2;
  int64_t n = 0;
  for (; n + kWide * W <= N; n += kWide * W) columns<A, kWide, Acc>(M, K, a, sam, sak, b + n, ldb, c + n, ldc);
  while (n < N) {  // N = 32 f32 columns: one 2-vector pass on AVX-512
    const int64_t r = (N - n) / W;
    if (kVecRegs == 32 && r >= 3) {
      columns<A, 3, Acc>(M, K, a, sam, sak, b + n, ldb, c + n, ldc);
      n += 3 * W;
    } else if (r >= 2) {
      columns<A, 2, Acc>(M, K, a, sam, sak, b + n, ldb, c + n, ldc);
      n += 2 * W;
    } else {
      columns<A, 1, Acc>(M, K, a, sam, sak, b + n, ldb, c + n, ldc);
      n += W;
    }
  }
}

// In-register transpose of one W x W tile (W = the vector width in elements),
// by block swaps: at stage S (W/2, ..., 1), rows i and i + S (i & S == 0)
// trade the S-wide blocks that lie off the diagonal of each 2S x 2S block:
//   new r[i][l]     = (l & S) ? r[i + S][l - S] : r[i][l]
//   new r[i + S][l] = (l & S) ? r[i + S][l]     : r[i][l + S]
// Each trade is two two-source shuffles with constant masks (vpermt2ps /
// vpermt2pd on AVX-512, permutes on AVX2): log2(W) stages of W shuffles,
// where the scalar loop did W^2 one-element stores W elements apart.
template <class A>
struct Lanes {  // the integer vector that indexes A's lanes in __builtin_shuffle
  using elem = std::conditional_t<sizeof(A) == 8, int64_t, int32_t>;
  typedef elem type __attribute__((vector_size(kVecBytes)));
};

template <class I, int W, int S, bool Hi, size_t... L>
constexpr I swap_mask(std::index_sequence<L...>) {
  return I{static_cast<typename std::remove_reference_t<decltype(I{}[0])>>(
      Hi ? ((L & S) ? W + L : L + S) : ((L & S) ? W + (L - S) : L))...};
}

template <class A, int S>
inline void swap_stage(typename Vec<A>::type* r) {
  if constexpr (S >= 1) {
    using I = typename Lanes<A>::type;
    constexpr int W = Vec<A>::W;
    constexpr I lo = swap_mask<I, W, S, false>(std::make_index_sequence<W>{});
    constexpr I hi = swap_mask<I, W, S, true>(std::make_index_sequence<W>{});
    for (int i = 0; i < W; ++i) {
      if (i & S) continue;
      const auto a = r[i], b = r[i + S];
      r[i] = __builtin_shuffle(a, b, lo);
      r[i + S] = __builtin_shuffle(a, b, hi);
    }
    swap_stage<A, S / 2>(r);
  }
}

/// dst[c][r] = src[r][c] for r < rows, c < cols (leading dims lds, ldd):
/// whole W x W tiles in registers, the edges element by element.
template <class A>
void transpose(const A* src, int64_t lds, int64_t rows, int64_t cols, A* dst, int64_t ldd) {
  using V = typename Vec<A>::type;
  constexpr int W = Vec<A>::W;
  const int64_t rt = rows / W * W, ct = cols / W * W;
  for (int64_t r0 = 0; r0 < rt; r0 += W)
    for (int64_t c0 = 0; c0 < ct; c0 += W) {
      V t[W];
      for (int i = 0; i < W; ++i) std::memcpy(&t[i], src + (r0 + i) * lds + c0, sizeof(V));
      swap_stage<A, W / 2>(t);
      for (int i = 0; i < W; ++i) std::memcpy(dst + (c0 + i) * ldd + r0, &t[i], sizeof(V));
    }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t c_from = r < rt ? ct : 0;  // full tiles done above
    for (int64_t c = c_from; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
  }
}

}  // namespace kiln::backend::cpu::KILN_ISA_NS::block
