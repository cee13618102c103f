// Matrix products on the CPU: layout canonicalisation, oneDNN's matmul
// primitive (f32, bf16) behind a per-thread LRU of primitives, and the plain
// kernel for f64 and integers.
#include "src/backend/cpu/linalg/matmul.h"

#include <oneapi/dnnl/dnnl.hpp>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include <array>
#include <bit>
#include <cstring>
#include <vector>

#include "kiln/core/parallel.h"
#include "src/backend/cpu/bf16_compute.h"
#include "src/backend/cpu/copy/copy.h"
#include "src/backend/cpu/dnnl_common.h"

namespace kiln::backend::cpu {

namespace {

constexpr const char* kOp = "matmul";

// ---------------------------------------------------------------------------
// Geometry. NOTE [Matmul canonical form]: every call is reduced to
//   out[b, m, n] = sum_k a[b, m, k] * b[b, k, n]   for b over `batch`
// with element strides per operand. Batch dims where out has size 1 are
// dropped, dims that are contiguous with their inner neighbour in all three
// operands are merged, broadcast dims have stride 0, and when b is shared by
// every batch and a's batch dims chain into its rows, they are folded into M
// (one large GEMM instead of many small ones, as [B, T, I] @ [I, O] in linear).
// ---------------------------------------------------------------------------
struct Geometry {
  Shape batch;              // out's batch sizes after merging
  Strides a_bs, b_bs, o_bs;  // per batch dim; 0 where a / b broadcast
  int64_t M = 0, K = 0, N = 0;
  int64_t a_sm = 0, a_sk = 0, b_sk = 0, b_sn = 0, o_sm = 0, o_sn = 0;

  int64_t batch_count() const { return numel(batch); }
};

// The stride of batch dim i of t aligned to out's nb batch dims (0 when t has
// no such dim or broadcasts along it).
int64_t batch_stride(const Tensor& t, int64_t i, int64_t nb) {
  int64_t ti = i - (nb - (t.dim() - 2));
  if (ti < 0 || t.shape()[ti] == 1) return 0;
  return t.strides()[ti];
}

Geometry make_geometry(const Tensor& a, const Tensor& b, const Tensor& out) {
  Geometry g;
  int64_t nd = out.dim(), nb = nd - 2;
  g.M = out.shape()[nd - 2];
  g.N = out.shape()[nd - 1];
  g.K = a.shape()[a.dim() - 1];
  g.a_sm = a.strides()[a.dim() - 2];
  g.a_sk = a.strides()[a.dim() - 1];
  g.b_sk = b.strides()[b.dim() - 2];
  g.b_sn = b.strides()[b.dim() - 1];
  g.o_sm = out.strides()[nd - 2];
  g.o_sn = out.strides()[nd - 1];
  for (int64_t i = 0; i < nb; ++i) {
    int64_t size = out.shape()[i];
    if (size == 1) continue;
    int64_t sa = batch_stride(a, i, nb), sb = batch_stride(b, i, nb), so = out.strides()[i];
    size_t p = g.batch.size();
    if (p > 0 && g.a_bs[p - 1] == sa * size && g.b_bs[p - 1] == sb * size && g.o_bs[p - 1] == so * size) {
      g.batch[p - 1] *= size;  // dim i continues the previous one in every operand
      g.a_bs[p - 1] = sa;
      g.b_bs[p - 1] = sb;
      g.o_bs[p - 1] = so;
      continue;
    }
    g.batch.push_back(size);
    g.a_bs.push_back(sa);
    g.b_bs.push_back(sb);
    g.o_bs.push_back(so);
  }
  // Rows of a size-1 dim may take any stride; pick the one that lets a fold.
  if (g.batch.size() == 1 && g.M == 1) {
    if (g.a_bs[0] != 0) g.a_sm = g.a_bs[0];
    g.o_sm = g.o_bs[0];
  }
  if (g.batch.size() == 1 && g.b_bs[0] == 0 && g.a_bs[0] != 0 && g.a_bs[0] == g.a_sm * g.M &&
      g.o_bs[0] == g.o_sm * g.M) {
    g.M *= g.batch[0];
    g.batch = {};
    g.a_bs = g.b_bs = g.o_bs = {};
  }
  return g;
}

// ---------------------------------------------------------------------------
// The plain kernel: row by row, out_row = sum_k a[m, k] * b_row(k) in acc_t<T>.
// Used for f64 (gradchecks), integers and empty reductions (K == 0).
// ---------------------------------------------------------------------------

// Element offsets of every batch for the three operands.
void batch_offsets(const Geometry& g, std::vector<int64_t>& ao, std::vector<int64_t>& bo, std::vector<int64_t>& oo) {
  int64_t n = g.batch_count();
  ao.assign(size_t(n), 0);
  bo.assign(size_t(n), 0);
  oo.assign(size_t(n), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i;
    for (int64_t d = int64_t(g.batch.size()) - 1; d >= 0; --d) {
      int64_t idx = rest % g.batch[d];
      rest /= g.batch[d];
      ao[i] += idx * g.a_bs[d];
      bo[i] += idx * g.b_bs[d];
      oo[i] += idx * g.o_bs[d];
    }
  }
}

template <class T>
void plain_matmul(const Geometry& g, const T* a, const T* b, T* o, const T* bias, int64_t bias_stride,
                  const MatmulEpilogue& ep) {
  using Acc = acc_t<T>;
  const Acc alpha = ep.alpha.to<Acc>(), beta = ep.beta.to<Acc>();
  const bool use_beta = ep.beta.to_double() != 0.0;
  std::vector<int64_t> ao, bo, oo;
  batch_offsets(g, ao, bo, oo);
  const int64_t rows = g.batch_count() * g.M;
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, g.K * g.N));
  parallel_for(0, rows, grain, [&](int64_t lo, int64_t hi) {
    std::vector<Acc> acc(size_t(g.N));
    for (int64_t r = lo; r < hi; ++r) {
      int64_t bi = r / g.M, m = r % g.M;
      const T* arow = a + ao[bi] + m * g.a_sm;
      const T* bmat = b + bo[bi];
      T* orow = o + oo[bi] + m * g.o_sm;
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (int64_t k = 0; k < g.K; ++k) {
        const Acc av = Acc(arow[k * g.a_sk]);
        const T* brow = bmat + k * g.b_sk;
        if (g.b_sn == 1)
          for (int64_t n = 0; n < g.N; ++n) acc[n] += av * Acc(brow[n]);
        else
          for (int64_t n = 0; n < g.N; ++n) acc[n] += av * Acc(brow[n * g.b_sn]);
      }
      for (int64_t n = 0; n < g.N; ++n) {
        Acc v = alpha * acc[n];
        if (bias) v += Acc(bias[n * bias_stride]);
        if (use_beta) v += beta * Acc(orow[n * g.o_sn]);
        orow[n * g.o_sn] = T(v);
      }
    }
  });
}

void run_plain(const Geometry& g, const Tensor& a, const Tensor& b, const Tensor& out, const MatmulEpilogue& ep) {
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      KILN_FAIL(kOp, "bool tensors are not supported");
    } else {
      const T* bias = ep.bias ? static_cast<const T*>(ep.bias->data_ptr()) : nullptr;
      int64_t bias_stride = ep.bias ? ep.bias->strides()[0] : 0;
      plain_matmul<T>(g, static_cast<const T*>(a.data_ptr()), static_cast<const T*>(b.data_ptr()),
                      static_cast<T*>(out.data_ptr()), bias, bias_stride, ep);
    }
  });
}

// ---------------------------------------------------------------------------
// Small f32 products. Below kSmallMacs multiply-adds oneDNN's per-call cost
// (cache lookup, argument setup, JIT dispatch: ~1-2 us) exceeds the
// arithmetic: the layers of RL policies ([1, 4] @ [4, 64], [64, 64] @ [64, 2],
// ...) and their gradients. These run here, single-threaded, in one of three
// loop orders chosen so the innermost loop is long and unit-stride:
//   dots   out[m, n]  = a[m, :] . b[:, n]   (a rows and b columns contiguous,
//                                            and M <= 4 or N small with K long)
//   the transposed problem out^T = b^T a^T by rows (N small, a columns contiguous, no bias)
//   rows   out[m, :] += a[m, k] * b[k, :]   (otherwise; b packed row-major unless its rows are contiguous)
// ---------------------------------------------------------------------------

constexpr int64_t kSmallMacs = int64_t(1) << 15;
constexpr int64_t kSmallMaxN = 1024;  // row accumulators live on the stack
constexpr int64_t kLong = 16;         // one AVX-512 vector of f32

struct SmallArgs {
  int64_t M, K, N;
  const float* a;
  int64_t a_sm, a_sk;
  const float* b;  // row-major [K, N] with leading stride ldb
  int64_t ldb;
  float* o;
  int64_t o_sm, o_sn;
  const float* bias;  // indexed by n, or null
  int64_t bias_stride;
  float alpha, beta;
};

inline float small_epilogue(const SmallArgs& p, float acc, int64_t m, int64_t n) {
  float v = p.alpha * acc;
  if (p.bias) v += p.bias[n * p.bias_stride];
  float& dst = p.o[m * p.o_sm + n * p.o_sn];
  if (p.beta != 0.0f) v += p.beta * dst;  // beta == 0 ignores old values (NaN included)
  return dst = v, v;
}

// rows: a block of up to 64 columns (4 vectors) accumulated over k in registers.
template <bool kFull>
inline void small_rows_block(const SmallArgs& p, int64_t m, int64_t n0, int64_t nb) {
  float acc[64] = {};
  const float* arow = p.a + m * p.a_sm;
  for (int64_t k = 0; k < p.K; ++k) {
    const float av = arow[k * p.a_sk];
    const float* brow = p.b + k * p.ldb + n0;
    if constexpr (kFull) {
#pragma omp simd
      for (int64_t j = 0; j < 64; ++j) acc[j] += av * brow[j];
    } else {
#pragma omp simd
      for (int64_t j = 0; j < nb; ++j) acc[j] += av * brow[j];
    }
  }
  float* dst = p.o + m * p.o_sm + n0 * p.o_sn;
  const float* bias = p.bias ? p.bias + n0 * p.bias_stride : nullptr;
  if (p.o_sn == 1 && (!bias || p.bias_stride == 1) && p.beta == 0.0f) {  // the usual case, vectorized
    if (bias) {
#pragma omp simd
      for (int64_t j = 0; j < nb; ++j) dst[j] = p.alpha * acc[j] + bias[j];
    } else {
#pragma omp simd
      for (int64_t j = 0; j < nb; ++j) dst[j] = p.alpha * acc[j];
    }
    return;
  }
  for (int64_t j = 0; j < nb; ++j) small_epilogue(p, acc[j], m, n0 + j);
}

void small_rows(const SmallArgs& p) {
  for (int64_t m = 0; m < p.M; ++m) {
    int64_t n0 = 0;
    for (; n0 + 64 <= p.N; n0 += 64) small_rows_block<true>(p, m, n0, 64);
    if (n0 < p.N) small_rows_block<false>(p, m, n0, p.N - n0);
  }
}

// dots: b is [K, N] column-major here (b[k, n] at k + n * ldb), a rows unit-stride.
#ifdef __AVX512F__
// Four columns at a time: a's chunk loaded once, four independent FMA chains,
// one shuffle-tree horizontal sum per column (GCC's `omp simd reduction`
// ends in 16 dependent scalar adds, which dominated a batch-1 layer).
void small_dots(const SmallArgs& p) {
  const int64_t K = p.K, tail = K % 16;
  const __mmask16 tm = __mmask16((1u << tail) - 1);
  for (int64_t m = 0; m < p.M; ++m) {
    const float* arow = p.a + m * p.a_sm;
    int64_t n = 0;
    for (; n + 4 <= p.N; n += 4) {
      const float* b0 = p.b + n * p.ldb;
      const float *b1 = b0 + p.ldb, *b2 = b1 + p.ldb, *b3 = b2 + p.ldb;
      __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
      int64_t k = 0;
      for (; k + 16 <= K; k += 16) {
        __m512 av = _mm512_loadu_ps(arow + k);
        s0 = _mm512_fmadd_ps(av, _mm512_loadu_ps(b0 + k), s0);
        s1 = _mm512_fmadd_ps(av, _mm512_loadu_ps(b1 + k), s1);
        s2 = _mm512_fmadd_ps(av, _mm512_loadu_ps(b2 + k), s2);
        s3 = _mm512_fmadd_ps(av, _mm512_loadu_ps(b3 + k), s3);
      }
      if (tail) {
        __m512 av = _mm512_maskz_loadu_ps(tm, arow + k);
        s0 = _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(tm, b0 + k), s0);
        s1 = _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(tm, b1 + k), s1);
        s2 = _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(tm, b2 + k), s2);
        s3 = _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(tm, b3 + k), s3);
      }
      small_epilogue(p, _mm512_reduce_add_ps(s0), m, n);
      small_epilogue(p, _mm512_reduce_add_ps(s1), m, n + 1);
      small_epilogue(p, _mm512_reduce_add_ps(s2), m, n + 2);
      small_epilogue(p, _mm512_reduce_add_ps(s3), m, n + 3);
    }
    for (; n < p.N; ++n) {
      const float* bcol = p.b + n * p.ldb;
      __m512 s0 = _mm512_setzero_ps();
      int64_t k = 0;
      for (; k + 16 <= K; k += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(arow + k), _mm512_loadu_ps(bcol + k), s0);
      if (tail) s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tm, arow + k), _mm512_maskz_loadu_ps(tm, bcol + k), s0);
      small_epilogue(p, _mm512_reduce_add_ps(s0), m, n);
    }
  }
}
#else
void small_dots(const SmallArgs& p) {
  for (int64_t m = 0; m < p.M; ++m) {
    const float* arow = p.a + m * p.a_sm;
    for (int64_t n = 0; n < p.N; ++n) {
      const float* bcol = p.b + n * p.ldb;
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int64_t k = 0; k < p.K; ++k) s += arow[k] * bcol[k];
      small_epilogue(p, s, m, n);
    }
  }
}
#endif

bool small_eligible(const Geometry& g, DType dt) {
  return dt == kF32 && g.batch.empty() && g.N <= kSmallMaxN && g.M <= kSmallMaxN &&
         g.M * g.N * g.K <= kSmallMacs;
}

void run_small(const Geometry& g, const Tensor& a, const Tensor& b, const Tensor& out, const MatmulEpilogue& ep) {
  SmallArgs p{g.M, g.K, g.N, static_cast<const float*>(a.data_ptr()), g.a_sm, g.a_sk,
              static_cast<const float*>(b.data_ptr()), 0, static_cast<float*>(out.data_ptr()), g.o_sm, g.o_sn,
              ep.bias ? static_cast<const float*>(ep.bias->data_ptr()) : nullptr,
              ep.bias ? ep.bias->strides()[0] : 0, ep.alpha.to<float>(), ep.beta.to<float>()};
  const bool dots_fit = g.a_sk == 1 && g.b_sk == 1;
  if (dots_fit && g.b_sn != 1 && (g.M <= 4 || (g.N < kLong && g.K >= kLong))) {
    // A few rows against b's contiguous columns (a layer's transposed weight
    // at batch 1: packing b would cost as much as the product), or few
    // columns with a long inner dim.
    p.ldb = g.b_sn;
    small_dots(p);
    return;
  }
  if (g.N < kLong && !ep.bias && g.a_sm == 1 && g.M >= kLong) {
    // out^T [N, M] = b^T [N, K] @ a^T [K, M]: a^T's rows are contiguous.
    SmallArgs t = p;
    t.M = g.N, t.N = g.M;
    t.a = p.b, t.a_sm = g.b_sn, t.a_sk = g.b_sk;
    t.b = p.a, t.ldb = g.a_sk;
    t.o_sm = g.o_sn, t.o_sn = g.o_sm;
    small_rows(t);
    return;
  }
  if (g.b_sn == 1) {
    p.ldb = g.b_sk;
  } else {
    thread_local std::vector<float> pack;  // grows to the largest b seen, then reused (no steady-state malloc)
    if (pack.size() < size_t(g.K * g.N)) pack.resize(size_t(g.K * g.N));
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t k = 0; k < g.K; ++k) pack[size_t(k * g.N + n)] = p.b[k * g.b_sk + n * g.b_sn];
    p.b = pack.data();
    p.ldb = g.N;
  }
  small_rows(p);
}

// ---------------------------------------------------------------------------
// oneDNN. One engine and one stream for the process (CPU streams execute in
// the calling thread); primitives live in a per-thread LRU keyed by the whole
// canonical geometry, so a repeated shape skips primitive creation (tens of
// µs) and reuses its memory objects (only the data handles change).
// ---------------------------------------------------------------------------

using dnnl_common::engine;
using dnnl_common::stream;

constexpr int kMaxDnnlDims = 12;  // DNNL_MAX_NDIMS

// A 2-D operand [R, C] with strides (sr, sc) that oneDNN's fast kernels take:
// row-major or column-major with a leading dimension that does not overlap.
bool plain_layout(int64_t R, int64_t C, int64_t sr, int64_t sc) {
  return (sc == 1 && sr >= C) || (sr == 1 && sc >= R);
}

// Stride for a size-1 dim in a 2-D operand, chosen so the layout stays plain.
void fix_unit_strides(int64_t R, int64_t C, int64_t& sr, int64_t& sc) {
  if (R == 1) sr = sc == 1 ? C : 1;
  if (C == 1) sc = sr == 1 ? R : 1;
  if (R == 1 && C == 1) sr = sc = 1;
}

struct Key {
  std::array<int64_t, 6 * kMaxDnnlDims + 8> v;  // only v[0, n) is meaningful (no zero-fill per call)
  int n = 0;
  void push(int64_t x) { v[size_t(n++)] = x; }
  bool operator==(const Key& o) const {
    return n == o.n && std::memcmp(v.data(), o.v.data(), size_t(n) * sizeof(int64_t)) == 0;
  }
};

struct KeyHash {
  size_t operator()(const Key& k) const { return dnnl_common::hash_words(k.v.data(), size_t(k.n)); }
};

struct Entry {
  dnnl::matmul prim;
  dnnl::memory src, wei, dst, bias;
  // The C API's argument list, built once (the C++ execute() converts a map
  // into this on every call).
  std::array<dnnl_exec_arg_t, 4> args{};
  int nargs = 0;
  std::string impl;
  bool unusable = false;  // oneDNN offers only its reference code, or rejects the layout
};

using PrimitiveCache = dnnl_common::LruCache<Key, Entry, KeyHash>;

// Per-thread state, reached through one thread_local lookup per call.
struct ThreadState {
  ThreadState() { last_impl.reserve(64); }  // alternating small and oneDNN calls reuse this buffer
  PrimitiveCache cache{128};
  std::string last_impl = "none";
};

ThreadState& state() {
  thread_local ThreadState s;
  return s;
}

dnnl::memory::data_type dnnl_type(DType t) {
  return t == kBF16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

// dims/strides of one operand as oneDNN sees it: [batch..., R, C]; a
// broadcast batch dim has size 1 (oneDNN broadcasts it) and, like every
// size-1 dim, a stride that spans the whole inner block.
void describe(const Geometry& g, const Strides& bs, bool is_out, int64_t R, int64_t C, int64_t sr, int64_t sc,
              dnnl::memory::dims& dims, dnnl::memory::dims& strides) {
  size_t nb = g.batch.size();
  dims.assign(nb + 2, 1);
  strides.assign(nb + 2, 1);
  dims[nb] = R;
  dims[nb + 1] = C;
  strides[nb] = sr;
  strides[nb + 1] = sc;
  int64_t span = (R - 1) * sr + (C - 1) * sc + 1;
  for (size_t d = nb; d-- > 0;) {
    bool bcast = !is_out && bs[d] == 0;
    dims[d] = bcast ? 1 : g.batch[d];
    strides[d] = bcast ? span : bs[d];
    span = std::max(span, (dims[d] - 1) * strides[d] + span);
  }
}

Entry make_entry(const Geometry& g, DType dt, int64_t a_sm, int64_t a_sk, int64_t b_sk, int64_t b_sn,
                 const Tensor* bias, DType bias_dt, float alpha, float beta) {
  using md = dnnl::memory::desc;
  dnnl::memory::dims ad, as, bd, bs, od, os;
  describe(g, g.a_bs, false, g.M, g.K, a_sm, a_sk, ad, as);
  describe(g, g.b_bs, false, g.K, g.N, b_sk, b_sn, bd, bs);
  describe(g, g.o_bs, true, g.M, g.N, g.o_sm, g.o_sn, od, os);
  md a_md(ad, dnnl_type(dt), as), b_md(bd, dnnl_type(dt), bs), o_md(od, dnnl_type(dt), os), bias_md;
  if (bias) {
    // [1, ..., 1, N], dense: oneDNN's kernels ignore bias strides.
    dnnl::memory::dims dd(od.size(), 1), ds(od.size(), g.N);
    dd.back() = g.N;
    ds.back() = 1;
    bias_md = md(dd, dnnl_type(bias_dt), ds);
  }
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(beta);
    attr.set_post_ops(po);
  }
  Entry e;
  dnnl::matmul::primitive_desc pd;
  try {
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, bias_md, o_md), attr, engine());
  } catch (const dnnl::error&) {
    // E.g. both operands broadcast along a batch dim: the caller retries
    // with contiguous copies.
    e.impl = "unsupported";
    e.unusable = true;
    return e;
  }
  e.prim = dnnl::matmul(pd);
  e.impl = pd.impl_info_str();
  e.src = dnnl::memory(a_md, engine(), nullptr);
  e.wei = dnnl::memory(b_md, engine(), nullptr);
  e.dst = dnnl::memory(o_md, engine(), nullptr);
  e.args[0] = {DNNL_ARG_SRC, e.src.get()};
  e.args[1] = {DNNL_ARG_WEIGHTS, e.wei.get()};
  e.args[2] = {DNNL_ARG_DST, e.dst.get()};
  e.nargs = 3;
  if (bias) {
    e.bias = dnnl::memory(bias_md, engine(), nullptr);
    e.args[size_t(e.nargs++)] = {DNNL_ARG_BIAS, e.bias.get()};
  }
  e.unusable = e.impl.rfind("ref", 0) == 0;
  return e;
}

// Threads for a product: kiln's count, or 1 below about half a million
// multiply-adds.
int threads_for(const Geometry& g) {
  constexpr int64_t kSerialMacs = int64_t(1) << 19;
  return g.batch_count() * g.M * g.N * g.K < kSerialMacs ? 1 : effective_num_threads();
}

// Runs the canonical product on oneDNN. Returns false (having done nothing)
// when oneDNN would only offer its slow reference code for this layout, or
// does not take it at all.
bool run_dnnl(const Geometry& g, const Tensor& a, const Tensor& b, const Tensor& out, const MatmulEpilogue& ep) {
  int64_t a_sm = g.a_sm, a_sk = g.a_sk, b_sk = g.b_sk, b_sn = g.b_sn;
  fix_unit_strides(g.M, g.K, a_sm, a_sk);
  fix_unit_strides(g.K, g.N, b_sk, b_sn);
  const DType dt = out.dtype();
  const DType bias_dt = ep.bias ? ep.bias->dtype() : dt;
  const float alpha = ep.alpha.to<float>(), beta = ep.beta.to<float>();

  // oneDNN's OpenMP code uses the calling thread's count, both when it plans a
  // primitive and when it runs one: keep it at kiln's, except for products
  // too small to repay a fork-join (a 64^3 product takes ~5 us; waking a
  // second thread costs ~1 us quiet, far more when the cores are shared).
  const int nt = threads_for(g);
  dnnl_common::OmpThreads threads(nt);

  Key key;
  key.push(int64_t(dt) | int64_t(bias_dt) << 8 | int64_t(ep.bias != nullptr) << 16 | int64_t(nt) << 24);
  key.push(int64_t(std::bit_cast<uint32_t>(alpha)) << 32 | std::bit_cast<uint32_t>(beta));
  for (int64_t x : {g.M, g.K, g.N, a_sm, a_sk, b_sk, b_sn, g.o_sm, g.o_sn}) key.push(x);
  for (size_t d = 0; d < g.batch.size(); ++d) {
    key.push(g.batch[d]);
    key.push(g.a_bs[d]);
    key.push(g.b_bs[d]);
    key.push(g.o_bs[d]);
  }

  ThreadState& ts = state();
  Entry* e = ts.cache.find(key);
  if (!e) e = ts.cache.insert(key, make_entry(g, dt, a_sm, a_sk, b_sk, b_sn, ep.bias, bias_dt, alpha, beta));
  if (e->unusable) return false;
  if (ts.last_impl != e->impl) ts.last_impl = e->impl;

  e->src.set_data_handle(a.data_ptr());
  e->wei.set_data_handle(b.data_ptr());
  e->dst.set_data_handle(out.data_ptr());
  if (ep.bias) e->bias.set_data_handle(ep.bias->data_ptr());
  dnnl_status_t st = dnnl_primitive_execute(e->prim.get(), stream().get(), e->nargs, e->args.data());
  KILN_CHECK(st == dnnl_success, kOp, "oneDNN failed to run {} on a {} x {} x {} product (status {})", e->impl, g.M,
             g.K, g.N, int(st));
  return true;
}

Tensor contiguous_copy(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype(), t.device());
  copy(t, c);
  return c;
}

}  // namespace

void matmul(const Tensor& a_in, const Tensor& b_in, const Tensor& out_in, const MatmulEpilogue& ep) {
  if (out_in.numel() == 0) return;
  const DType dt = out_in.dtype();
  if (widen_bf16(dt)) {
    // out's old values matter only when beta != 0.
    Tensor out = ep.beta.to_double() != 0.0 ? widened(out_in) : Tensor::empty(out_in.shape(), kF32, out_in.device());
    Tensor bias = ep.bias && ep.bias->dtype() == kBF16 ? widened(*ep.bias) : Tensor();
    MatmulEpilogue ep32 = ep;
    if (bias.defined()) ep32.bias = &bias;
    matmul(widened(a_in), widened(b_in), out, ep32);
    copy(out, out_in);
    return;
  }
  Geometry g = make_geometry(a_in, b_in, out_in);
  const bool dnnl_dtype = dt == kF32 || dt == kBF16;
  if (!dnnl_dtype || g.K == 0 || int64_t(g.batch.size()) + 2 > kMaxDnnlDims) {
    state().last_impl = "plain";
    run_plain(g, a_in, b_in, out_in, ep);
    return;
  }
  if (small_eligible(g, dt)) {
    state().last_impl = "small";
    run_small(g, a_in, b_in, out_in, ep);
    return;
  }

  // Operands whose matrices are neither row- nor column-major (strided
  // slices, expanded rows) are copied once; transposed views pass as they are.
  Tensor a = a_in, b = b_in, out = out_in;
  const Tensor* bias = ep.bias;
  Tensor bias_copy;
  bool copied = false;
  auto plain2d = [](const Tensor& t) {
    int64_t R = t.shape()[t.dim() - 2], C = t.shape()[t.dim() - 1];
    int64_t sr = t.strides()[t.dim() - 2], sc = t.strides()[t.dim() - 1];
    fix_unit_strides(R, C, sr, sc);
    return plain_layout(R, C, sr, sc);
  };
  if (!plain2d(a)) a = contiguous_copy(a), copied = true;
  if (!plain2d(b)) b = contiguous_copy(b), copied = true;
  if (out.strides()[out.dim() - 1] != 1 || !plain2d(out)) {
    out = Tensor::empty(out_in.shape(), dt, out_in.device());
    if (ep.beta.to_double() != 0.0) copy(out_in, out);
    copied = true;
  }
  if (bias && bias->strides()[0] != 1 && bias->numel() > 1) {  // oneDNN reads the bias densely
    bias_copy = contiguous_copy(*bias);
    bias = &bias_copy;
  }
  if (copied) g = make_geometry(a, b, out);
  MatmulEpilogue ep2 = ep;
  ep2.bias = bias;
  if (!run_dnnl(g, a, b, out, ep2)) {
    // A layout oneDNN only runs in reference code: retry fully contiguous.
    a = contiguous_copy(a);
    b = contiguous_copy(b);
    if (!out.is_contiguous()) {
      out = Tensor::empty(out_in.shape(), dt, out_in.device());
      if (ep.beta.to_double() != 0.0) copy(out_in, out);
    }
    g = make_geometry(a, b, out);
    if (!run_dnnl(g, a, b, out, ep2)) {
      state().last_impl = "plain";
      run_plain(g, a, b, out, ep2);
    }
  }
  if (!out.is_same(out_in)) copy(out, out_in);
}

const std::string& last_matmul_impl() { return state().last_impl; }

MatmulCacheStats matmul_cache_stats() {
  const PrimitiveCache& c = state().cache;
  return {c.hits(), c.misses(), c.size()};
}

}  // namespace kiln::backend::cpu
