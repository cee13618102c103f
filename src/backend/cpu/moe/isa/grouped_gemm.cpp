// The grouped f32 products of the MoE layer (contracts in ../moe.h), compiled
// once per kernel ISA (NOTE [Per-ISA kernels] in CMakeLists.txt; the plain
// references are in ../moe_ref.cpp).
//
// Why not one oneDNN matmul per expert: the run lengths change every step,
// so every call was a new shape, a primitive-cache miss and a JIT compile
// (84 of them per MoE GPT step). Here:
//   - B is packed once per call and expert into panels of kNR columns
//     ([panel][k][kNR], zero-padded), so the microkernel reads it with unit
//     stride whatever op(b[e]) is;
//   - one parallel loop runs over (expert, block of rows): the experts'
//     products share the threads instead of running one after the other;
//   - A's rows are read through a row map (the gather of the tokens, fused)
//     and C's rows written through one (the scatter back to token order);
//   - the microkernel keeps a kMR x kNR tile of C in registers (8 x 32 on
//     AVX-512: 16 zmm accumulators; 6 x 16 on AVX2: 12 ymm of 16).
// Every element of C is summed over k in order by one thread, so results are
// bitwise the same on any thread count.
#include "src/backend/cpu/moe/isa/grouped_gemm.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "kiln/core/parallel.h"
#include "kiln/core/tensor.h"
#include "src/backend/cpu/elementwise/elementwise_math.h"

namespace kiln::backend::cpu::KILN_ISA_NS {

namespace {

#ifdef __AVX512F__
constexpr int kVL = 16;  // floats per vector
constexpr int kMR = 8;   // rows of the register tile
#else
constexpr int kVL = 8;
constexpr int kMR = 6;
#endif
constexpr int kNV = 2;             // vectors per row of the register tile
constexpr int kNR = kNV * kVL;     // its columns
constexpr int64_t kRowBlock = 48;  // rows of A per task (a multiple of both kMRs)

typedef float Vec __attribute__((vector_size(kVL * sizeof(float))));
typedef float VecU __attribute__((vector_size(kVL * sizeof(float)), aligned(4), may_alias));

inline Vec load(const float* p) { return *reinterpret_cast<const VecU*>(p); }
inline void store(float* p, Vec v) { *reinterpret_cast<VecU*>(p) = v; }

// dst[0, n) = src[0, n), then zeros up to w (w a multiple of kVL): inline
// vector copies, not a libc call per short row.
inline void copy_pad(float* dst, const float* src, int64_t n, int64_t w) {
  int64_t c = 0;
  for (; c + kVL <= n; c += kVL) store(dst + c, load(src + c));
  for (; c < n; ++c) dst[c] = src[c];
  for (; c < w; ++c) dst[c] = 0.0f;
}

// y[0, n) = gelu(y) in place (the exact GELU x Phi(x)) and, when d, d[0,
// n) = gelu'(y) = Phi(y) + y phi(y) from the same Phi and exponential:
// math::gelu_grad_f32's steps with its Phi kept for the GELU, so the values
// are bit for bit fn::Gelu's x * normal_cdf_f32(x) and gelu_grad_f32(x).
// Straight-line code over a row: GCC vectorizes it. Not inlined into the
// tile loop, where GCC compiled it 2x slower.
__attribute__((noinline)) void gelu_rows(float* y, float* d, int64_t n) {
  if (!d) {
    for (int64_t c = 0; c < n; ++c) y[c] = y[c] * math::normal_cdf_f32(y[c]);
    return;
  }
  for (int64_t c = 0; c < n; ++c) {
    const float v = y[c], v2 = v * v;
    const float lo = std::fma(v, v, -v2);
    const float h = 0.5f * v2;
    const float e = exp_f32(-h);
    const float ez2 = h > 100.0f ? exp_f32(-100.0f) : e;
    const float tail = 0.5f * math::erfc_f32_exp(std::fabs(v) * 0.707106781186547524f, ez2, 0.5f * lo);
    const float cdf = v < 0.0f ? tail : 1.0f - tail;
    y[c] = v * cdf;
    d[c] = cdf + v * (e * 0.39894228040143267794f);
  }
}

// c[i, :] = sum_k a(k, i) * bp[k NR + :] for i < MR over NR = NV kVL columns;
// rows i < mr and columns < nr are stored to o[i][0, nr).
template <int MR, int NV, class ALoad>
inline void micro(int64_t K, ALoad&& a, const float* bp, float* const* o, int mr, int nr) {
  constexpr int NR = NV * kVL;
  Vec c[MR][NV];
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) c[i][v] = Vec{};
  for (int64_t k = 0; k < K; ++k) {
    Vec b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) b[v] = load(bp + v * kVL);
    bp += NR;
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      const float s = a(k, i);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) c[i][v] += s * b[v];
    }
  }
  if (mr == MR && nr == NR) {
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) store(o[i] + v * kVL, c[i][v]);
    return;
  }
  alignas(64) float tmp[NR];
  for (int i = 0; i < mr; ++i) {
    for (int v = 0; v < NV; ++v) store(tmp + v * kVL, c[i][v]);
    std::memcpy(o[i], tmp, size_t(nr) * sizeof(float));
  }
}

std::vector<int64_t> run_starts(int64_t E, const int64_t* sizes) {
  std::vector<int64_t> s(size_t(E + 1), 0);
  for (int64_t e = 0; e < E; ++e) s[size_t(e + 1)] = s[size_t(e)] + sizes[e];
  return s;
}

}  // namespace

void grouped_gemm_f32(const GroupedGemm& g) {
  const int64_t E = g.E, K = g.K, N = g.N;
  if (N == 0) return;
  const std::vector<int64_t> start = run_starts(E, g.sizes);
  const int64_t panels = (N + kNR - 1) / kNR, per_expert = panels * K * kNR;

  // Pack op(b[e]) [K, N] of every expert with rows into [panel][k][kNR].
  Tensor packed = Tensor::empty({std::max<int64_t>(1, E * per_expert)}, kF32);
  float* bp = static_cast<float*>(packed.data_ptr());
  parallel_for(0, E * panels, 4, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t e = t / panels, j = t % panels;
      if (g.sizes[e] == 0) continue;
      float* dst = bp + e * per_expert + j * K * kNR;
      const int64_t n0 = j * kNR, nn = std::min<int64_t>(kNR, N - n0);
      if (nn < kNR) std::fill(dst, dst + K * kNR, 0.0f);
      if (g.trans_b) {  // b[e] [N, K]: column n of op(b[e]) is row n of b[e]
        const float* src = g.b + e * N * K + n0 * K;
        for (int64_t c = 0; c < nn; ++c)
          for (int64_t k = 0; k < K; ++k) dst[k * kNR + c] = src[c * K + k];
      } else {  // b[e] [K, N]
        const float* src = g.b + e * K * N + n0;
        for (int64_t k = 0; k < K; ++k) copy_pad(dst + k * kNR, src + k * N, nn, kNR);
      }
    }
  });

  struct Task {
    int64_t e, r0, r1;  // rows [r0, r1) of the grouped order, all in run e
  };
  std::vector<Task> tasks;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r = start[size_t(e)]; r < start[size_t(e + 1)]; r += kRowBlock)
      tasks.push_back({e, r, std::min(r + kRowBlock, start[size_t(e + 1)])});

  parallel_for(0, int64_t(tasks.size()), 1, [&](int64_t lo, int64_t hi) {
    const float* ap[kMR];
    float* op[kMR];
    for (int64_t t = lo; t < hi; ++t) {
      const Task& task = tasks[size_t(t)];
      const float* pe = bp + task.e * per_expert;
      for (int64_t m0 = task.r0; m0 < task.r1; m0 += kMR) {
        const int mr = int(std::min<int64_t>(kMR, task.r1 - m0));
        for (int i = 0; i < kMR; ++i) {
          const int64_t r = m0 + std::min(i, mr - 1);  // rows past the end repeat the last (not stored)
          ap[i] = g.a + (g.a_rows ? g.a_rows[r] : r) * g.lda;
          op[i] = g.out + (g.o_rows ? g.o_rows[r] : r) * g.ldo;
        }
        for (int64_t j = 0; j < panels; ++j) {
          const int nr = int(std::min<int64_t>(kNR, N - j * kNR));
          float* oj[kMR];
          for (int i = 0; i < kMR; ++i) oj[i] = op[i] + j * kNR;
          micro<kMR, kNV>(K, [&](int64_t k, int i) { return ap[i][k]; }, pe + j * K * kNR, oj, mr, nr);
        }
      }
      if (g.gelu) {  // the epilogue, on the task's rows while they are in cache
        for (int64_t r = task.r0; r < task.r1; ++r) {
          const int64_t o = g.o_rows ? g.o_rows[r] : r;
          gelu_rows(g.out + o * g.ldo, g.gelu_grad ? g.gelu_grad + o * g.ldo : nullptr, N);
        }
      }
    }
  });
}

void grouped_gemm_weight_grad_f32(const GroupedGemmWeightGrad& g) {
  // dw[e] [N, K] = sum over run e of dy[row]^T x[row]: a product with M = N,
  // inner dim = the run, columns = K. Both operands are packed per expert
  // (which also applies the row maps): dy in strips of kMR columns
  // [strip][r][kMR], x in panels of kNR columns [panel][r][kNR].
  const int64_t E = g.E, N = g.N, K = g.K;
  const std::vector<int64_t> start = run_starts(E, g.sizes);
  const int64_t M = start[size_t(E)];
  const int64_t strips = (N + kMR - 1) / kMR, panels = (K + kNR - 1) / kNR;
  Tensor abuf = Tensor::empty({std::max<int64_t>(1, M * strips * kMR)}, kF32);
  Tensor bbuf = Tensor::empty({std::max<int64_t>(1, M * panels * kNR)}, kF32);
  float* ap = static_cast<float*>(abuf.data_ptr());
  float* bp = static_cast<float*>(bbuf.data_ptr());

  // Pack, one task per (expert, block of rows): rows of run e land at
  // [start_e * width + strip * len * w + (r - start_e) * w].
  struct Block {
    int64_t e, r0, r1;
  };
  std::vector<Block> blocks;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r = start[size_t(e)]; r < start[size_t(e + 1)]; r += 64)
      blocks.push_back({e, r, std::min(r + 64, start[size_t(e + 1)])});
  parallel_for(0, int64_t(blocks.size()), 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const Block& b = blocks[size_t(t)];
      const int64_t s = start[size_t(b.e)], len = g.sizes[b.e];
      float* ae = ap + s * strips * kMR;
      float* be = bp + s * panels * kNR;
      for (int64_t r = b.r0; r < b.r1; ++r) {
        const float* dyr = g.dy + (g.dy_rows ? g.dy_rows[r] : r) * g.ldy;
        const float* xr = g.x + (g.x_rows ? g.x_rows[r] : r) * g.ldx;
        for (int64_t st = 0; st < strips; ++st) {
          float* d = ae + st * len * kMR + (r - s) * kMR;
          const int64_t n0 = st * kMR, nn = std::min<int64_t>(kMR, N - n0);
          for (int64_t i = 0; i < nn; ++i) d[i] = dyr[n0 + i];
          for (int64_t i = nn; i < kMR; ++i) d[i] = 0.0f;
        }
        for (int64_t p = 0; p < panels; ++p) {
          float* d = be + p * len * kNR + (r - s) * kNR;
          const int64_t k0 = p * kNR, kk = std::min<int64_t>(kNR, K - k0);
          copy_pad(d, xr + k0, kk, kNR);
        }
      }
    }
  });

  // A task (e, strip) costs the run length of e, and parallel_for hands each
  // thread one contiguous chunk: in expert-major order a thread got whole
  // experts, so uneven routing loaded one thread more (up to the share of
  // the largest experts). Here the strips are cut into one block per thread
  // and the order is (block, expert, strip): each thread's chunk holds every
  // expert's share of its strips, expert by expert (one expert's packed x at
  // a time in cache). Each dw element is still summed by one task in row
  // order, so results do not depend on the split.
  const int64_t strip_blocks = std::max<int64_t>(1, std::min<int64_t>(strips, effective_num_threads()));
  const int64_t per_block = (strips + strip_blocks - 1) / strip_blocks;
  std::vector<std::pair<int64_t, int64_t>> order;  // (e, strip) in task order
  order.reserve(size_t(E * strips));
  for (int64_t b = 0; b < strip_blocks; ++b)
    for (int64_t e = 0; e < E; ++e)
      for (int64_t st = b * per_block; st < std::min(strips, (b + 1) * per_block); ++st) order.push_back({e, st});
  parallel_for(0, int64_t(order.size()), 1, [&](int64_t lo, int64_t hi) {
    float* op[kMR];
    for (int64_t t = lo; t < hi; ++t) {
      const auto [e, st] = order[size_t(t)];
      const int64_t len = g.sizes[e], s = start[size_t(e)];
      const int64_t n0 = st * kMR;
      const int mr = int(std::min<int64_t>(kMR, N - n0));
      float* dwe = g.dw + e * N * K;
      if (len == 0) {
        for (int i = 0; i < mr; ++i) std::fill(dwe + (n0 + i) * K, dwe + (n0 + i + 1) * K, 0.0f);
        continue;
      }
      const float* as = ap + s * strips * kMR + st * len * kMR;
      for (int i = 0; i < kMR; ++i) op[i] = dwe + (n0 + std::min(i, mr - 1)) * K;
      for (int64_t p = 0; p < panels; ++p) {
        const int nr = int(std::min<int64_t>(kNR, K - p * kNR));
        float* oj[kMR];
        for (int i = 0; i < kMR; ++i) oj[i] = op[i] + p * kNR;
        micro<kMR, kNV>(len, [&](int64_t k, int i) { return as[k * kMR + i]; }, bp + s * panels * kNR + p * len * kNR, oj, mr,
              nr);
      }
    }
  });
}

}  // namespace kiln::backend::cpu::KILN_ISA_NS
