// CPU flash attention, compiled once per kernel ISA (NOTE [Per-ISA kernels] in
// CMakeLists.txt): tiled forward with online softmax, tiled backward that
// recomputes the probabilities from the saved row logsumexp, and small
// register-tiled GEMM micro-kernels for the block products, sized to the
// ISA's vector registers (the reference is in ../attention.cpp).
// Letter legend: B batch, H heads, Tq queries, Tk keys, Dh query/key dim, Dv
// value dim; W vector lanes (block::Vec, src/backend/cpu/block_gemm.h).
//
// NOTE [Flash attention tiling]: the forward runs one task per (b, h, block
// of kBq queries); it streams over blocks of kBk keys, keeping per query row
// the running max m, running sum l and the unnormalised output (kBq x Dv), so
// no [Tq, Tk] matrix exists, only a score tile of kBk keys x kRows query rows
// (stored transposed: K is read in place and each softmax step is a vector
// over the rows). Under `causal` each tile of kRows query rows computes only
// the keys its last row may see, so the work is close to the triangle. The
// backward runs one task per (b, h): for each key block it accumulates dK and
// dV in [kBk, D] buffers while sweeping the query rows that see it,
// and adds into a per-head dQ accumulator (no atomics: the head is the task).
// Scratch lives in one kiln tensor per call (counted by memory_stats), sized
// O(kBq * D) per worker in the forward and O((Tq + Tk) * D) in the backward.
#include "src/backend/cpu/nn/attention.h"
#include "src/backend/cpu/nn/isa/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/parallel.h"
#include "src/backend/cpu/block_gemm.h"
#include "src/backend/cpu/dispatch.h"
#include "src/backend/cpu/vec_math.h"

namespace kiln::backend::cpu::KILN_ISA_NS {

namespace {

constexpr int64_t kBq = 64;    // query rows per forward task
constexpr int64_t kBk = 64;    // keys per block
constexpr int64_t kRows = 16;  // query rows per score tile

// Vectors, padding and the block products: block_gemm.h (the register width
// of this copy's ISA).
using block::Vec;

// Key blocks and row tiles are whole vectors in both dtypes.
static_assert(kBk % Vec<float>::W == 0 && kBk % Vec<double>::W == 0);
static_assert(kRows % Vec<float>::W == 0 && kRows % Vec<double>::W == 0 && kBq % kRows == 0);

// n rows of d elements (row r at src + r * ld) copied into a [n, dp] buffer
// (zero padded columns), times `mul`.
template <class A>
void pack_rows(const A* src, int64_t ld, int64_t d, int64_t n, int64_t dp, A mul, A* dst) {
  for (int64_t r = 0; r < n; ++r) {
    const A* s = src + r * ld;
    A* o = dst + r * dp;
    for (int64_t c = 0; c < d; ++c) o[c] = s[c] * mul;
    for (int64_t c = d; c < dp; ++c) o[c] = A(0);
  }
}

// Keys [0, n) of a [n, d] block (key j at src + j * ls) transposed into
// [d, ld] (columns n..np zero). Kept scalar: vectorised along the strided
// side it became AVX-512 gathers (with the row sums' in backward_impl, about
// a third of the backward's samples at gpt_char's shapes in perf annotate);
// plain loads and stores of each key's row are cheaper.
template <class A>
__attribute__((optimize("no-tree-vectorize"))) void pack_transposed(const A* src, int64_t ls, int64_t d, int64_t n,
                                                                      int64_t np, int64_t ld, A* dst) {
  for (int64_t j = 0; j < n; ++j) {
    const A* s = src + j * ls;
    for (int64_t c = 0; c < d; ++c) dst[c * ld + j] = s[c];
  }
  for (int64_t c = 0; c < d; ++c)
    for (int64_t j = n; j < np; ++j) dst[c * ld + j] = A(0);
}

// A [B, H, T, D] operand with unit stride along D and any other strides: head
// (b, h) row t starts at p + b * sb + h * sh + t * st. The heads of a
// [B, T, H * D] projection viewed as [B, H, T, D] (MultiheadAttention's
// split_heads) are read in place this way, and the output can be written in
// that layout, so no copy is made on either side.
template <class A>
struct Heads {
  A* p = nullptr;
  int64_t sb = 0, sh = 0, st = 0;
  A* head(int64_t bh, int64_t H) const { return p + (bh / H) * sb + (bh % H) * sh; }
};

template <class A>
Heads<A> heads_of(const Tensor& t) {
  const Strides& st = t.strides();
  return {static_cast<A*>(t.data_ptr()), st[0], st[1], st[2]};
}

// The mask of one (b, h): element (i, j) at base[i * si + j * sj].
struct MaskView {
  const bool* base = nullptr;
  int64_t si = 0, sj = 0;
};

MaskView mask_for(const AttentionShape& s, int64_t b, int64_t h) {
  if (!s.mask.defined()) return {};
  const Strides& st = s.mask.strides();
  return {static_cast<const bool*>(s.mask.data_ptr()) + b * st[0] + h * st[1], st[2], st[3]};
}

// Runs task(t, worker_scratch) for t in [0, tasks) on the pool: one worker per
// thread takes the next task from a shared counter, so uneven (causal) tasks
// balance. Each task writes only its own rows, so results do not depend on the
// schedule. Below 2^19 multiply-adds in all (`work`) one thread runs
// everything: a fork-join costs more than it saves there (as in matmul).
template <class A, class F>
void run_tasks(int64_t tasks, double work, int64_t scratch_per_worker, DType dtype, F&& task) {
  if (tasks <= 0) return;
  const int64_t threads = work < double(int64_t(1) << 19) ? 1 : effective_num_threads();
  const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(threads, tasks));
  const int64_t per = (scratch_per_worker + 15) / 16 * 16;  // 64-byte aligned regions
  Tensor scratch = Tensor::empty({workers * per}, dtype);
  A* base = static_cast<A*>(scratch.data_ptr());
  std::atomic<int64_t> next{0};
  parallel_for(0, workers, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t w = lo; w < hi; ++w)
      for (int64_t t = next.fetch_add(1); t < tasks; t = next.fetch_add(1)) task(t, base + w * per);
  });
}

// ---------------------------------------------------------------------------
// Forward (NOTE [Flash attention tiling]).
// ---------------------------------------------------------------------------
template <class A>
void forward_impl(const AttentionShape& s, Heads<const A> q, Heads<const A> k, Heads<const A> v, Heads<A> out,
                  A* lse) {
  const int64_t Tq = s.Tq, Tk = s.Tk, Dh = s.Dh, Dv = s.Dv, off = Tk - Tq;
  const int64_t Dvp = block::padded<A>(Dv);
  const int64_t nqb = (Tq + kBq - 1) / kBq;
  const A scale = A(s.scale), ninf = -std::numeric_limits<A>::infinity();
  // Scratch: Qt [Dh, kBq] (scaled q, transposed), O [kBq, Dvp], Vb [kBk, Dvp], St [kBk, kRows], m, l [kBq].
  const int64_t scratch = Dh * kBq + kBq * Dvp + kBk * Dvp + kBk * kRows + 2 * kBq;
  const double work = double(s.B * s.H) * double(Tq) * double(Tk) * double(Dh + Dv);  // S and P V
  run_tasks<A>(s.B * s.H * nqb, work, scratch, dtype_v<A>, [&](int64_t t, A* ws) {
    A *Qt = ws, *O = Qt + Dh * kBq, *Vb = O + kBq * Dvp, *St = Vb + kBk * Dvp, *m = St + kBk * kRows;
    A* l = m + kBq;
    const int64_t bh = t / nqb, qb = nqb - 1 - t % nqb;  // longest (causal) blocks first
    const int64_t i0 = qb * kBq, nr = std::min(kBq, Tq - i0);
    const A* qh = q.head(bh, s.H) + i0 * q.st;
    const A* kh = k.head(bh, s.H);
    const A* vh = v.head(bh, s.H);
    const MaskView mk = mask_for(s, bh / s.H, bh % s.H);

    // Scores are computed transposed, St [keys, kRows query rows] = K Qt, so
    // K is read in place and every softmax step is a vector over query rows.
    std::fill(Qt, Qt + Dh * kBq, A(0));
    const int64_t qst = q.st;  // a local: no reload (and gathers) per element
    for (int64_t r = 0; r < nr; ++r) {
      const A* qrow = qh + r * qst;
      for (int64_t d = 0; d < Dh; ++d) Qt[d * kBq + r] = qrow[d] * scale;
    }
    std::fill(O, O + kBq * Dvp, A(0));
    std::fill(m, m + kBq, ninf);
    std::fill(l, l + kBq, A(0));
    const int64_t kend = s.causal ? std::clamp<int64_t>(i0 + nr + off, 0, Tk) : Tk;
    for (int64_t k0 = 0; k0 < kend; k0 += kBk) {
      const int64_t kn = std::min(kBk, kend - k0);
      pack_rows(vh + k0 * v.st, v.st, Dv, kn, Dvp, A(1), Vb);
      for (int64_t r0 = 0; r0 < nr; r0 += kRows) {
        const int64_t rn = std::min(kRows, nr - r0);
        // Keys this tile's last row may see.
        const int64_t cols = s.causal ? std::min(kn, i0 + r0 + rn + off - k0) : kn;
        if (cols <= 0) continue;
        block::gemm_wide<A, false>(cols, kRows, Dh, kh + k0 * k.st, k.st, 1, Qt + r0, kBq, St, kRows);
        A tmax[kRows], shift[kRows], alpha[kRows], sum[kRows];
        std::fill(tmax, tmax + kRows, ninf);
        std::fill(sum, sum + kRows, A(0));
        // Causal: key k0 + j is allowed for tile row r iff j + first <= r.
        const int64_t first = k0 - off - i0 - r0;
        for (int64_t j = 0; j < cols; ++j) {
          A* sj = St + j * kRows;
          if (s.causal)  // rows r < j + first may not see this key (only near the diagonal)
            std::fill(sj, sj + std::clamp<int64_t>(j + first, 0, kRows), ninf);
          if (mk.base) {
            const bool* mcol = mk.base + (i0 + r0) * mk.si + (k0 + j) * mk.sj;
            for (int64_t r = 0; r < rn; ++r)
              if (!mcol[r * mk.si]) sj[r] = ninf;
          }
#pragma omp simd
          for (int64_t r = 0; r < kRows; ++r) tmax[r] = sj[r] > tmax[r] ? sj[r] : tmax[r];
        }
        A *mt = m + r0, *lt = l + r0;
#pragma omp simd
        for (int64_t r = 0; r < kRows; ++r) {
          const A mnew = mt[r] > tmax[r] ? mt[r] : tmax[r];
          shift[r] = mnew == ninf ? A(0) : mnew;  // a row with no allowed key yet: every p is exp(-inf) = 0
          alpha[r] = vexp(mt[r] - shift[r]);      // rescales the old sum and output; 0 before the first key
          mt[r] = mnew;
        }
        for (int64_t j = 0; j < cols; ++j) {
          A* sj = St + j * kRows;
#pragma omp simd
          for (int64_t r = 0; r < kRows; ++r) {
            const A p = vexp(sj[r] - shift[r]);
            sj[r] = p;
            sum[r] += p;
          }
        }
        for (int64_t r = 0; r < rn; ++r) {
          lt[r] = lt[r] * alpha[r] + sum[r];
          if (alpha[r] != A(1)) {
            A* orow = O + (r0 + r) * Dvp;
#pragma omp simd
            for (int64_t c = 0; c < Dvp; ++c) orow[c] *= alpha[r];
          }
        }
        // O[r] += sum_j P[r][j] V[j], with P stored transposed in St.
        block::gemm_wide<A, true>(rn, Dvp, cols, St, 1, kRows, Vb, Dvp, O + r0 * Dvp, Dvp);
      }
    }
    const int64_t ost = out.st;
    A* oh = out.head(bh, s.H) + i0 * ost;
    A* lh = lse + bh * Tq + i0;
    for (int64_t r = 0; r < nr; ++r) {
      if (l[r] > A(0)) {
        const A inv = A(1) / l[r];
        A* orow = oh + r * ost;
        for (int64_t c = 0; c < Dv; ++c) orow[c] = O[r * Dvp + c] * inv;
        lh[r] = m[r] + std::log(l[r]);
      } else {  // fully masked row: zero output, and exp(s - lse) = 0 in backward
        std::fill(oh + r * ost, oh + r * ost + Dv, A(0));
        lh[r] = std::numeric_limits<A>::infinity();
      }
    }
  });
}

// ---------------------------------------------------------------------------
// Backward: with S = scale q k^T (masked), P = exp(S - lse), Di = rowsum(dO * O):
//   dV = P^T dO, dP = dO V^T, dS = P * (dP - Di), dQ = scale dS K, dK = scale dS^T Q.
// ---------------------------------------------------------------------------
template <class A>
void backward_impl(const AttentionShape& s, Heads<const A> q, Heads<const A> k, Heads<const A> v,
                   Heads<const A> out, const Tensor& dout, const A* lse, Heads<A> dq, Heads<A> dk, Heads<A> dv) {
  // dout may be strided (sum's gradient is an expanded scalar): read in place.
  const A* gp = dout.data<A>();
  const Strides& gs = dout.strides();
  const int64_t Tq = s.Tq, Tk = s.Tk, Dh = s.Dh, Dv = s.Dv, off = Tk - Tq;
  const int64_t Dhp = block::padded<A>(Dh), Dvp = block::padded<A>(Dv);
  const int64_t Tkp = (Tk + kBk - 1) / kBk * kBk;
  const A scale = A(s.scale);
  // Scratch: Qp [Tq, Dhp] (scaled q), dOp [Tq, Dvp], Kp [Tkp, Dhp], dQa [Tq, Dhp], Di [Tq],
  // Kt [Dh, kBk], Vt [Dv, kBk], S and dP [kRows, kBk], dKa [kBk, Dhp], dVa [kBk, Dvp].
  const int64_t scratch = Tq * Dhp + Tq * Dvp + Tkp * Dhp + Tq * Dhp + Tq + Dh * kBk + Dv * kBk + 2 * kRows * kBk +
                          kBk * Dhp + kBk * Dvp;
  const double work = double(s.B * s.H) * double(Tq) * double(Tk) * double(3 * Dh + 2 * Dv);  // S, dP, dV, dK, dQ
  run_tasks<A>(s.B * s.H, work, scratch, dtype_v<A>, [&](int64_t bh, A* ws) {
    A *Qp = ws, *dOp = Qp + Tq * Dhp, *Kp = dOp + Tq * Dvp, *dQa = Kp + Tkp * Dhp, *Di = dQa + Tq * Dhp;
    A *Kt = Di + Tq, *Vt = Kt + Dh * kBk, *S = Vt + Dv * kBk, *dP = S + kRows * kBk, *dKa = dP + kRows * kBk;
    A* dVa = dKa + kBk * Dhp;
    const A* qh = q.head(bh, s.H);
    const A* kh = k.head(bh, s.H);
    const A* vh = v.head(bh, s.H);
    const A* oh = out.head(bh, s.H);
    const A* gh = gp + (bh / s.H) * gs[0] + (bh % s.H) * gs[1];
    const A* L = lse + bh * Tq;
    const MaskView mk = mask_for(s, bh / s.H, bh % s.H);

    pack_rows(qh, q.st, Dh, Tq, Dhp, scale, Qp);  // dK = dS^T (scale q) needs no extra scaling
    if (gs[3] == 1) {  // rows of unit stride (the usual case): a plain copy, not a gather
      pack_rows(gh, gs[2], Dv, Tq, Dvp, A(1), dOp);
    } else {
      for (int64_t i = 0; i < Tq; ++i) {
        A* o = dOp + i * Dvp;
        for (int64_t c = 0; c < Dv; ++c) o[c] = gh[i * gs[2] + c * gs[3]];
        for (int64_t c = Dv; c < Dvp; ++c) o[c] = A(0);
      }
    }
    pack_rows(kh, k.st, Dh, Tk, Dhp, A(1), Kp);
    std::fill(Kp + Tk * Dhp, Kp + Tkp * Dhp, A(0));
    std::fill(dQa, dQa + Tq * Dhp, A(0));
    // Row pointers hoisted: with out.st read through the lambda's captured
    // reference inside the loop, GCC vectorised it into AVX-512 gathers of
    // contiguous data.
    const int64_t ost = out.st;
    for (int64_t i = 0; i < Tq; ++i) {
      const A* drow = dOp + i * Dvp;
      const A* orow = oh + i * ost;
      A d = 0;
#pragma omp simd reduction(+ : d)
      for (int64_t c = 0; c < Dv; ++c) d += drow[c] * orow[c];
      Di[i] = d;
    }

    for (int64_t k0 = 0; k0 < Tk; k0 += kBk) {
      const int64_t kn = std::min(kBk, Tk - k0), knp = block::padded<A>(kn);
      pack_transposed(kh + k0 * k.st, k.st, Dh, kn, knp, kBk, Kt);
      pack_transposed(vh + k0 * v.st, v.st, Dv, kn, knp, kBk, Vt);
      std::fill(dKa, dKa + knp * Dhp, A(0));
      std::fill(dVa, dVa + knp * Dvp, A(0));
      // Causal: query i sees key k0 only when i + off >= k0.
      const int64_t rstart = s.causal ? std::clamp<int64_t>(k0 - off, 0, Tq) : 0;
      for (int64_t r0 = rstart; r0 < Tq; r0 += kRows) {
        const int64_t rn = std::min(kRows, Tq - r0);
        const int64_t cols = s.causal ? std::min(kn, r0 + rn + off - k0) : kn;
        if (cols <= 0) continue;
        const int64_t cp = block::padded<A>(cols);
        block::gemm_wide<A, false>(rn, cp, Dh, Qp + r0 * Dhp, Dhp, 1, Kt, kBk, S, kBk);
        block::gemm_wide<A, false>(rn, cp, Dv, dOp + r0 * Dvp, Dvp, 1, Vt, kBk, dP, kBk);
        for (int64_t r = 0; r < rn; ++r) {
          const int64_t i = r0 + r;
          const int64_t lim = std::max<int64_t>(0, s.causal ? std::min(cols, i + off - k0 + 1) : cols);
          A* srow = S + r * kBk;
          A* prow = dP + r * kBk;
          const A li = L[i], di = Di[i];
#pragma omp simd
          for (int64_t j = 0; j < lim; ++j) {
            A p = vexp(srow[j] - li);  // li = +inf for a fully masked row: p = 0
            srow[j] = p;
            prow[j] = p * (prow[j] - di);
          }
          for (int64_t j = lim; j < cp; ++j) srow[j] = prow[j] = A(0);
          if (mk.base) {
            const bool* mrow = mk.base + i * mk.si + k0 * mk.sj;
            for (int64_t j = 0; j < lim; ++j)
              if (!mrow[j * mk.sj]) srow[j] = prow[j] = A(0);
          }
        }
        // dV[j] += sum_r P[r][j] dO[r];  dK[j] += sum_r dS[r][j] Qp[r];  dQ[r] += sum_j dS[r][j] K[j].
        block::gemm_wide<A, true>(cols, Dvp, rn, S, 1, kBk, dOp + r0 * Dvp, Dvp, dVa, Dvp);
        block::gemm_wide<A, true>(cols, Dhp, rn, dP, 1, kBk, Qp + r0 * Dhp, Dhp, dKa, Dhp);
        block::gemm_wide<A, true>(rn, Dhp, cols, dP, kBk, 1, Kp + k0 * Dhp, Dhp, dQa + r0 * Dhp, Dhp);
      }
      A* dkh = dk.head(bh, s.H) + k0 * dk.st;
      A* dvh = dv.head(bh, s.H) + k0 * dv.st;
      for (int64_t j = 0; j < kn; ++j) {
        std::memcpy(dkh + j * dk.st, dKa + j * Dhp, size_t(Dh) * sizeof(A));
        std::memcpy(dvh + j * dv.st, dVa + j * Dvp, size_t(Dv) * sizeof(A));
      }
    }
    A* dqh = dq.head(bh, s.H);
    for (int64_t i = 0; i < Tq; ++i)
      for (int64_t c = 0; c < Dh; ++c) dqh[i * dq.st + c] = dQa[i * Dhp + c] * scale;
  });
}

// The fast kernels read and write [B, H, T, D] operands through Heads: D must
// have unit stride (the op copies an operand that does not).
void check_rows(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    KILN_CHECK(t->dim() == 4 && (t->size(3) <= 1 || t->strides()[3] == 1), op,
               "operand {} must be 4-D with unit stride along its last dim", to_string(t->shape()));
}

}  // namespace

void flash_attention_forward(const AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& lse) {
  dispatch_only<float, double>(q.dtype(), [&](auto tag) {
    using A = typename decltype(tag)::type;
    check_rows("flash_attention", {&q, &k, &v, &out});
    forward_impl<A>(s, heads_of<const A>(q), heads_of<const A>(k), heads_of<const A>(v), heads_of<A>(out),
                    lse.data<A>());
  }, "flash_attention");
}

void flash_attention_backward(const AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& dout, const Tensor& lse, const Tensor& dq,
                              const Tensor& dk, const Tensor& dv) {
  dispatch_only<float, double>(q.dtype(), [&](auto tag) {
    using A = typename decltype(tag)::type;
    check_rows("flash_attention_backward", {&q, &k, &v, &out, &dq, &dk, &dv});
    backward_impl<A>(s, heads_of<const A>(q), heads_of<const A>(k), heads_of<const A>(v), heads_of<const A>(out),
                     dout, lse.data<A>(), heads_of<A>(dq), heads_of<A>(dk), heads_of<A>(dv));
  }, "flash_attention_backward");
}

}  // namespace kiln::backend::cpu::KILN_ISA_NS
