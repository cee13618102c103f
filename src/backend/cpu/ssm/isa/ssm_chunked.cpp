// The Mamba-3 scan in chunked matrix form (contracts in ../ssm.h), compiled
// once per kernel ISA (NOTE [Per-ISA kernels] in CMakeLists.txt). One task
// per (batch, head) pair as in isa/ssm.cpp, so results do not depend on the
// thread count; inside a task the sequence is cut into chunks of L steps and
// each chunk is a handful of block products (backend/cpu/block_gemm.h).
//
// NOTE [Mamba-3 chunked scan]: within a chunk (local steps j = 0..L-1, the
// state H0 [P, N] before it, (k_-1, v_-1) the last rotated key and value
// before it), with a_j = A dt, s_j = sigmoid(trap), g_j = s_j dt_j (gamma),
// e_j = (1 - s_j) dt_j (so beta_j = e_j alpha_j), c_j = a_0 + ... + a_j:
//
//   h_j = exp(c_j) H0' + sum_{i <= j} M[j, i] v_i k_i^T,
//   H0' = H0 + e_0 v_-1 k_-1^T                       (the trapezoid's first term)
//   M[j, j] = g_j,  M[j, i] = exp(c_j - c_i) (g_i + e_{i+1})  for i < j,
//
// (v_i k_i^T enters state i with weight g_i and state i + 1 with
// e_{i+1} alpha_{i+1}, then decays by alpha.) So the chunk's outputs are
//
//   O = (Q K^T o M) V + diag(exp c) Q H0'^T + D V        Q, K [L, N]; V, O [L, P]
//   H_end = exp(c_{L-1}) H0' + V^T diag(M[L-1, :]) K    (the last row of M)
//
// three products of [L, N] x [N, L], [L, L] x [L, P], [L, N] x [N, P] and
// one [N, L] x [L, P] (the state is kept transposed, Ht [N, P], so every
// product reads its operands in place). The backward is the adjoint of the
// same few products per chunk, last chunk first, plus the gates' gradients
// through M and exp c (O(L^2) scalars), then the rotation's and the angle
// state's adjoint step by step (O(L R)), as in the sequential kernel. The
// forward saves exactly what the sequential forward saves (theta_all, the
// state h before each chunk in [P, N], o), so either backward runs from
// either forward.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kiln/core/parallel.h"
#include "src/backend/cpu/dispatch.h"
#include "src/backend/cpu/elementwise/elementwise_math.h"
#include "src/backend/cpu/block_gemm.h"
#include "src/backend/cpu/ssm/isa/scan_common.h"
#include "src/backend/cpu/ssm/isa/ssm.h"

namespace kiln::backend::cpu::KILN_ISA_NS {

namespace {

using namespace scan;
using block::gemm;
using block::padded;
using block::transpose;

// The per-thread working set of one chunk: every block padded to whole
// vectors (padding columns stay zero unless noted), sized for the longest chunk.
template <class T>
struct Work {
  int64_t L, Lp, Np, Pp;
  std::vector<T> Q, K, Kt, V, S, O, Ht, Hn, mV;  // [L, Np] x2, [Np, Lp], [L, Pp], [L, Lp], [L, Pp], [Np, Pp] x2, [L, Pp]
  std::vector<T> sg, dt, g, e, c, E, w, m;        // per step of the chunk
  std::vector<T> theta, cs, sn, th, kp, vp;       // rotation and the carried (k_-1, v_-1)
  Work(const Dims& d)
      : L(d.chunk), Lp(padded<T>(d.chunk)), Np(padded<T>(d.N)), Pp(padded<T>(d.P)) {
    Q.assign(L * Np, T(0)), K.assign(L * Np, T(0)), Kt.assign(Np * Lp, T(0)), V.assign(L * Pp, T(0));
    S.assign(L * Lp, T(0)), O.assign(L * Pp, T(0)), Ht.assign(Np * Pp, T(0)), Hn.assign(Np * Pp, T(0));
    mV.assign(L * Pp, T(0));
    for (auto* v : {&sg, &dt, &g, &e, &c, &E, &w, &m}) v->assign(L, T(0));
    for (auto* v : {&theta, &cs, &sn, &th}) v->assign(std::max<int64_t>(d.R, 1), T(0));
    kp.assign(Np, T(0)), vp.assign(Pp, T(0));
  }
};

// The gates of steps t0 .. t0 + Lc - 1 and the chunk's decays: c, E = exp c,
// w_i = g_i + e_{i+1} (the weight of v_i k_i^T on later rows; unused for the
// last step) and m = M[Lc - 1, :].
template <class T>
void chunk_gates(Work<T>& W, const T* adt, const T* dt, const T* trap, int64_t Lc, auto row) {
  T cum = 0;
  for (int64_t j = 0; j < Lc; ++j) {
    const int64_t r = row(j);
    const T sgv = T(1) / (T(1) + std::exp(-trap[r]));
    W.sg[j] = sgv, W.dt[j] = dt[r], W.g[j] = sgv * dt[r], W.e[j] = (T(1) - sgv) * dt[r];
    cum += adt[r];
    W.c[j] = cum;
    W.E[j] = std::exp(cum);
  }
  for (int64_t j = 0; j + 1 < Lc; ++j) W.w[j] = W.g[j] + W.e[j + 1];
  W.w[Lc - 1] = W.g[Lc - 1];
  const T cl = W.c[Lc - 1];
  T* m = W.m.data();
  const T* c = W.c.data();
  const T* w = W.w.data();
#pragma omp simd
  for (int64_t i = 0; i < Lc; ++i) m[i] = math::exp(cl - c[i]) * w[i];
  m[Lc - 1] = W.g[Lc - 1];
}

// dst[0, n) = src[0, n), dst[0, n) = 0 for the per-step rows (a few dozen
// elements): std::copy_n / std::fill, or a plain loop, which GCC turns into
// the same thing (-ftree-loop-distribute-patterns), are calls into libc's
// memmove / memset per row. Whole vectors, then single elements; the empty
// asm makes each value opaque, so the loop stays register loads and stores.
// (perf put 6 % of a step in those calls; most of it was the first touch of
// the rows, which moved to the loads here, so the step got no faster.)
template <class T>
inline void copy_row(const T* __restrict src, int64_t n, T* __restrict dst) {
  using V = typename block::Vec<T>::type;
  constexpr int64_t W = block::Vec<T>::W;
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    V x;
    std::memcpy(&x, src + i, sizeof(V));
    asm("" : "+v"(x));
    std::memcpy(dst + i, &x, sizeof(V));
  }
  for (; i < n; ++i) {
    T x = src[i];
    asm("" : "+v"(x));
    dst[i] = x;
  }
}
template <class T>
inline void zero_row(T* dst, int64_t n) {
  using V = typename block::Vec<T>::type;
  constexpr int64_t W = block::Vec<T>::W;
  V z{};
  asm("" : "+v"(z));
  int64_t i = 0;
  for (; i + W <= n; i += W) std::memcpy(dst + i, &z, sizeof(V));
  T zs = T(0);
  asm("" : "+v"(zs));
  for (; i < n; ++i) dst[i] = zs;
}

// Row j of the decay matrix: dec[i] = exp(c_j - c_i) for i < j. j is a step
// inside one chunk (j < chunk <= T; the chunk's [L, L] blocks are in memory),
// so it is an int: with an int64 bound GCC could not see that the loop ends
// and warned (-Waggressive-loop-optimizations) on an iteration that never runs.
template <class T>
inline void decay_row(const T* c, int j, T* dec) {
  const T cj = c[j];
#pragma omp simd
  for (int i = 0; i < j; ++i) dec[i] = math::exp(cj - c[i]);
}

// Rotated q, k of row rq of q, k (the angle state's cos, sin in W) into the chunk's row j.
template <class T>
inline void rotate_row(Work<T>& W, const T* q, const T* k, const T* qb, const T* kb, int64_t N, int64_t R,
                       int64_t rq, int64_t j) {
  rotate(q + rq * N, qb, W.cs.data(), W.sn.data(), N, R, W.Q.data() + j * W.Np);
  rotate(k + rq * N, kb, W.cs.data(), W.sn.data(), N, R, W.K.data() + j * W.Np);
}

template <class T>
void forward_chunked_t(const Mamba3Scan& s) {
  const Dims d = dims_of(s);
  const int64_t N = d.N, P = d.P, R = d.R, H = d.H;
  const T *q = cp<T>(s.q), *k = cp<T>(s.k), *v = cp<T>(s.v), *adt = cp<T>(s.adt), *dt = cp<T>(s.dt),
          *trap = cp<T>(s.trap), *qb = cp<T>(s.q_bias), *kb = cp<T>(s.k_bias), *ang = cp<T>(s.angles),
          *D = cp<T>(s.D), *z = cp<T>(s.z), *a0 = cp<T>(s.angle0), *h0 = cp<T>(s.h0), *k0 = cp<T>(s.k0),
          *v0 = cp<T>(s.v0);
  T *y = mp<T>(s.y), *aT = mp<T>(s.angle_T), *hT = mp<T>(s.h_T), *kT = mp<T>(s.k_T), *vT = mp<T>(s.v_T),
    *th_all = mp<T>(s.theta_all), *ckpt = mp<T>(s.h_ckpt), *o_all = mp<T>(s.o_all);
  parallel_for(0, d.B * H, 1, [&](int64_t lo, int64_t hi) {
    Work<T> W(d);
    const int64_t Np = W.Np, Pp = W.Pp, Lp = W.Lp;
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t b = bh / H, hh = bh % H;
      std::fill(W.Ht.begin(), W.Ht.end(), T(0));
      std::fill(W.kp.begin(), W.kp.end(), T(0));
      std::fill(W.vp.begin(), W.vp.end(), T(0));
      std::fill(W.theta.begin(), W.theta.end(), T(0));
      if (h0) {
        std::copy_n(a0 + bh * R, R, W.theta.data());
        transpose(h0 + bh * P * N, N, P, N, W.Ht.data(), Pp);
        std::copy_n(k0 + bh * N, N, W.kp.data());
        std::copy_n(v0 + bh * P, P, W.vp.data());
      }
      const T Dh = D ? D[hh] : T(0);
      for (int64_t c0 = 0; c0 < d.nc; ++c0) {
        const int64_t t0 = c0 * d.chunk, Lc = std::min(d.T, t0 + d.chunk) - t0;
        auto row = [&](int64_t j) { return (b * d.T + t0 + j) * H + hh; };
        if (ckpt) transpose(W.Ht.data(), Pp, N, P, ckpt + (bh * d.nc + c0) * P * N, N);
        // The angle state, step by step (it is a running sum mod 2 pi), and the rotated rows.
        for (int64_t j = 0; j < Lc; ++j) {
          const int64_t r = row(j);
          const T dtv = dt[r];
          const T* ar = ang + r * R;
          T* thp = W.th.data();
#pragma omp simd
          for (int64_t i = 0; i < R; ++i) thp[i] = math::tanh(ar[i]);
          T *thv = W.theta.data(), *csv = W.cs.data(), *snv = W.sn.data();
#pragma omp simd
          for (int64_t i = 0; i < R; ++i) {
            thv[i] = wrap<T>(thv[i] + T(kPi) * thp[i] * dtv);
            sin_cos(thv[i], snv[i], csv[i]);
          }
          if (th_all) copy_row(W.theta.data(), R, th_all + r * R);
          rotate_row(W, q, k, qb + hh * N, kb + hh * N, N, R, qk_row(d, r), j);
          copy_row(v + r * P, P, W.V.data() + j * Pp);
        }
        chunk_gates(W, adt, dt, trap, Lc, row);
        // H0' = H0 + e_0 v_-1 k_-1^T (in Ht [N, P]).
        for (int64_t n = 0; n < N; ++n) {
          const T a = W.e[0] * W.kp[n];
          T* hr = W.Ht.data() + n * Pp;
          const T* vp = W.vp.data();
#pragma omp simd
          for (int64_t p = 0; p < P; ++p) hr[p] += a * vp[p];
        }
        // S = (Q K^T) o M, zero above the diagonal.
        transpose(W.K.data(), Np, Lc, N, W.Kt.data(), Lp);
        gemm<T, false>(Lc, Lp, N, W.Q.data(), Np, 1, W.Kt.data(), Lp, W.S.data(), Lp);
        for (int64_t j = 0; j < Lc; ++j) {
          T* sr = W.S.data() + j * Lp;
          const T cj = W.c[j];
          const T *c = W.c.data(), *w = W.w.data();
#pragma omp simd
          for (int64_t i = 0; i < j; ++i) sr[i] *= math::exp(cj - c[i]) * w[i];
          sr[j] *= W.g[j];
          zero_row(sr + j + 1, Lp - j - 1);
        }
        // O = diag(E) Q H0'^T + S V (+ D v, then the gate).
        gemm<T, false>(Lc, Pp, N, W.Q.data(), Np, 1, W.Ht.data(), Pp, W.O.data(), Pp);
        for (int64_t j = 0; j < Lc; ++j) {
          T* orow = W.O.data() + j * Pp;
          const T Ej = W.E[j];
#pragma omp simd
          for (int64_t p = 0; p < P; ++p) orow[p] *= Ej;
        }
        gemm<T, true>(Lc, Pp, Lc, W.S.data(), Lp, 1, W.V.data(), Pp, W.O.data(), Pp);
        for (int64_t j = 0; j < Lc; ++j) {
          const int64_t r = row(j);
          T* orow = W.O.data() + j * Pp;
          const T* vr = v + r * P;
          if (D) {
#pragma omp simd
            for (int64_t p = 0; p < P; ++p) orow[p] += Dh * vr[p];
          }
          T* yr = y + r * P;
          if (z) {
            const T* zr = z + r * P;
#pragma omp simd
            for (int64_t p = 0; p < P; ++p) yr[p] = orow[p] * zr[p] * math::sigmoid(zr[p]);
          } else {
            copy_row(orow, P, yr);
          }
          if (o_all) copy_row(orow, P, o_all + r * P);
        }
        // H_end = E_{L-1} H0' + K^T diag(m) V (in Ht [N, P]).
        for (int64_t j = 0; j < Lc; ++j) {
          const T mj = W.m[j];
          const T* vr = W.V.data() + j * Pp;
          T* mv = W.mV.data() + j * Pp;
#pragma omp simd
          for (int64_t p = 0; p < Pp; ++p) mv[p] = mj * vr[p];
        }
        gemm<T, false>(N, Pp, Lc, W.K.data(), 1, Np, W.mV.data(), Pp, W.Hn.data(), Pp);
        const T El = W.E[Lc - 1];
        for (int64_t i = 0; i < N * Pp; ++i) W.Ht[i] = W.Hn[i] + El * W.Ht[i];
        copy_row(W.K.data() + (Lc - 1) * Np, N, W.kp.data());
        copy_row(W.V.data() + (Lc - 1) * Pp, P, W.vp.data());
      }
      transpose(W.Ht.data(), Pp, N, P, hT + bh * P * N, N);
      std::copy_n(W.theta.data(), R, aT + bh * R);
      std::copy_n(W.kp.data(), N, kT + bh * N);
      std::copy_n(W.vp.data(), P, vT + bh * P);
    }
  });
}

// The backward's extra blocks beside Work.
template <class T>
struct BackWork {
  std::vector<T> Sr, dS, dO, EdO, dV, dQ, dK, X, Vt, Hp, dHt, dHt0, dH, dec, dM, csb, snb;
  std::vector<T> dg, de, dw, dc, dE, dqv, dkv, dvv, sgz;
  BackWork(const Dims& d, const Work<T>& W) {
    const int64_t L = W.L, Lp = W.Lp, Np = W.Np, Pp = W.Pp, R = std::max<int64_t>(d.R, 1);
    Sr.assign(L * Lp, T(0)), dS.assign(L * Lp, T(0)), dO.assign(L * Pp, T(0)), EdO.assign(L * Pp, T(0));
    dV.assign(L * Pp, T(0)), dQ.assign(L * Np, T(0)), dK.assign(L * Np, T(0));
    X.assign(L * std::max(Np, Pp), T(0)), Vt.assign(Pp * Lp, T(0)), Hp.assign(Pp * Np, T(0));
    dHt.assign(Np * Pp, T(0)), dHt0.assign(Np * Pp, T(0)), dH.assign(Pp * Np, T(0)), dec.assign(Lp, T(0)), dM.assign(Lp, T(0));
    csb.assign(L * R, T(0)), snb.assign(L * R, T(0));
    for (auto* v : {&dg, &de, &dw, &dc, &dE}) v->assign(L, T(0));
    dqv.assign(Np, T(0)), dkv.assign(Np, T(0)), dvv.assign(Pp, T(0)), sgz.assign(Pp, T(0));
  }
};

template <class T>
void backward_chunked_t(const Mamba3Scan& s, const Mamba3ScanGrads& gr) {
  const Dims d = dims_of(s);
  const int64_t N = d.N, P = d.P, R = d.R, H = d.H;
  const T *q = cp<T>(s.q), *k = cp<T>(s.k), *v = cp<T>(s.v), *adt = cp<T>(s.adt), *dt = cp<T>(s.dt),
          *trap = cp<T>(s.trap), *qb = cp<T>(s.q_bias), *kb = cp<T>(s.k_bias), *ang = cp<T>(s.angles),
          *D = cp<T>(s.D), *z = cp<T>(s.z), *k0 = cp<T>(s.k0), *v0 = cp<T>(s.v0), *th_all = cp<T>(s.theta_all),
          *ckpt = cp<T>(s.h_ckpt), *o_all = cp<T>(s.o_all);
  const T *dy = cp<T>(gr.dy), *daT = cp<T>(gr.d_angle_T), *dhT = cp<T>(gr.d_h_T), *dkT = cp<T>(gr.d_k_T),
          *dvT = cp<T>(gr.d_v_T);
  T *dq = mp<T>(gr.dq), *dk = mp<T>(gr.dk), *dv = mp<T>(gr.dv), *dadt = mp<T>(gr.dadt), *ddt = mp<T>(gr.ddt),
    *dtrap = mp<T>(gr.dtrap), *dang = mp<T>(gr.dangles), *dz = mp<T>(gr.dz), *da0 = mp<T>(gr.d_angle0),
    *dh0 = mp<T>(gr.d_h0), *dk0 = mp<T>(gr.d_k0), *dv0 = mp<T>(gr.d_v0);
  // Per-(b, h) partial sums of the parameter gradients: q_bias [N], k_bias [N], D.
  std::vector<T> part(static_cast<size_t>(d.B * H * (2 * N + 1)), T(0));
  parallel_for(0, d.B * H, 1, [&](int64_t lo, int64_t hi) {
    Work<T> W(d);
    BackWork<T> G(d, W);
    const int64_t Np = W.Np, Pp = W.Pp, Lp = W.Lp;
    std::vector<T> dkc(Np, T(0)), dvc(Pp, T(0)), dthc(std::max<int64_t>(R, 1), T(0));
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t b = bh / H, hh = bh % H;
      T* pq = part.data() + bh * (2 * N + 1);
      T* pk = pq + N;
      T& pD = pk[N];
      std::fill(G.dHt.begin(), G.dHt.end(), T(0));
      transpose(dhT + bh * P * N, N, P, N, G.dHt.data(), Pp);
      std::copy_n(dkT + bh * N, N, dkc.data());
      std::copy_n(dvT + bh * P, P, dvc.data());
      std::copy_n(daT + bh * R, R, dthc.data());
      const T Dh = D ? D[hh] : T(0);
      auto trig = [&](int64_t r) {
        const T* thr = th_all + r * R;
        T *csv = W.cs.data(), *snv = W.sn.data();
#pragma omp simd
        for (int64_t i = 0; i < R; ++i) sin_cos(thr[i], snv[i], csv[i]);
      };
      for (int64_t c0 = d.nc - 1; c0 >= 0; --c0) {
        const int64_t t0 = c0 * d.chunk, Lc = std::min(d.T, t0 + d.chunk) - t0;
        auto row = [&](int64_t j) { return (b * d.T + t0 + j) * H + hh; };
        // ---- Recompute the chunk's blocks ----
        const T* hck = ckpt + (bh * d.nc + c0) * P * N;  // H0 [P, N]
        std::fill(W.kp.begin(), W.kp.end(), T(0));
        std::fill(W.vp.begin(), W.vp.end(), T(0));
        if (t0 == 0) {
          if (k0) std::copy_n(k0 + bh * N, N, W.kp.data()), std::copy_n(v0 + bh * P, P, W.vp.data());
        } else {
          const int64_t r = (b * d.T + t0 - 1) * H + hh;
          trig(r);
          rotate(k + qk_row(d, r) * N, kb + hh * N, W.cs.data(), W.sn.data(), N, R, W.kp.data());
          copy_row(v + r * P, P, W.vp.data());
        }
        for (int64_t j = 0; j < Lc; ++j) {
          const int64_t r = row(j);
          trig(r);
          copy_row(W.cs.data(), R, G.csb.data() + j * R);
          copy_row(W.sn.data(), R, G.snb.data() + j * R);
          rotate_row(W, q, k, qb + hh * N, kb + hh * N, N, R, qk_row(d, r), j);
          copy_row(v + r * P, P, W.V.data() + j * Pp);
        }
        chunk_gates(W, adt, dt, trap, Lc, row);
        const T e0 = W.e[0];
        // H0' = H0 + e_0 v_-1 k_-1^T as [P, N], in the checkpoint's layout
        // (the same products as forward's fold: H0 + (e_0 k_-1[n]) v_-1[p]).
        // The transposed Ht [N, P] is only needed to recompute o.
        {
          T* ek = G.dkv.data();
          for (int64_t n = 0; n < N; ++n) ek[n] = e0 * W.kp[n];
          for (int64_t p = 0; p < P; ++p) {
            const T vpp = W.vp[p];
            const T* hr = hck + p * N;
            T* hp = G.Hp.data() + p * Np;
#pragma omp simd
            for (int64_t n = 0; n < N; ++n) hp[n] = hr[n] + ek[n] * vpp;
          }
        }
        if (!o_all) transpose(G.Hp.data(), Np, P, N, W.Ht.data(), Pp);
        transpose(W.K.data(), Np, Lc, N, W.Kt.data(), Lp);
        transpose(W.V.data(), Pp, Lc, P, G.Vt.data(), Lp);
        // Sr = Q K^T (unmasked), S = Sr o M.
        gemm<T, false>(Lc, Lp, N, W.Q.data(), Np, 1, W.Kt.data(), Lp, G.Sr.data(), Lp);
        for (int64_t j = 0; j < Lc; ++j) {
          const T* srr = G.Sr.data() + j * Lp;
          T* sr = W.S.data() + j * Lp;
          T* dec = G.dec.data();
          decay_row(W.c.data(), static_cast<int>(j), dec);
          const T* w = W.w.data();
#pragma omp simd
          for (int64_t i = 0; i < j; ++i) sr[i] = srr[i] * dec[i] * w[i];
          sr[j] = srr[j] * W.g[j];
          zero_row(sr + j + 1, Lp - j - 1);
        }
        // o (saved, else recomputed as forward does).
        if (!o_all) {
          gemm<T, false>(Lc, Pp, N, W.Q.data(), Np, 1, W.Ht.data(), Pp, W.O.data(), Pp);
          for (int64_t j = 0; j < Lc; ++j)
            for (int64_t p = 0; p < P; ++p) W.O[j * Pp + p] *= W.E[j];
          gemm<T, true>(Lc, Pp, Lc, W.S.data(), Lp, 1, W.V.data(), Pp, W.O.data(), Pp);
          for (int64_t j = 0; j < Lc; ++j)
            for (int64_t p = 0; p < P; ++p) W.O[j * Pp + p] += Dh * W.V[j * Pp + p];
        }
        // ---- dO through the gate; dD ----
        for (int64_t j = 0; j < Lc; ++j) {
          const int64_t r = row(j);
          const T* op = o_all ? o_all + r * P : W.O.data() + j * Pp;
          const T* gyr = dy + r * P;
          T* dor = G.dO.data() + j * Pp;
          if (z) {
            const T* zr = z + r * P;
            T* dzr = dz + r * P;
            T* sgp = G.sgz.data();
#pragma omp simd
            for (int64_t p = 0; p < P; ++p) sgp[p] = math::sigmoid(zr[p]);
#pragma omp simd
            for (int64_t p = 0; p < P; ++p) {
              dzr[p] = gyr[p] * op[p] * sgp[p] * (T(1) + zr[p] * (T(1) - sgp[p]));
              dor[p] = gyr[p] * zr[p] * sgp[p];
            }
          } else {
            copy_row(gyr, P, dor);
          }
          const T* vr = W.V.data() + j * Pp;
          T acc = 0;
#pragma omp simd reduction(+ : acc)
          for (int64_t p = 0; p < P; ++p) acc += dor[p] * vr[p];
          pD += acc;
          const T Ej = W.E[j];
          T* edr = G.EdO.data() + j * Pp;
#pragma omp simd
          for (int64_t p = 0; p < Pp; ++p) edr[p] = Ej * dor[p];
        }
        // ---- dS = dO V^T; gates through M; dSr = dS o M ----
        gemm<T, false>(Lc, Lp, P, G.dO.data(), Pp, 1, G.Vt.data(), Lp, G.dS.data(), Lp);
        std::fill_n(G.dg.begin(), Lc, T(0));
        std::fill_n(G.dw.begin(), Lc, T(0));
        std::fill_n(G.dc.begin(), Lc, T(0));
        std::fill_n(G.dE.begin(), Lc, T(0));
        std::fill_n(G.de.begin(), Lc, T(0));
        // dM[j, i] dec w for i < j: into dw_i (dM dec), dc_j (+dM M), dc_i (-dM M).
        auto through_M = [&](int j, const T* dM) {
          T* dec = G.dec.data();
          decay_row(W.c.data(), j, dec);
          const T* w = W.w.data();
          T* dw = G.dw.data();
          T* dc = G.dc.data();
          T sum = 0;
#pragma omp simd reduction(+ : sum)
          for (int i = 0; i < j; ++i) {
            const T gd = dM[i] * dec[i];
            dw[i] += gd;
            const T gm = gd * w[i];
            dc[i] -= gm;
            sum += gm;
          }
          dc[j] += sum;
          G.dg[j] += dM[j];
        };
        for (int64_t j = 0; j < Lc; ++j) {
          T* dsr = G.dS.data() + j * Lp;
          const T* srr = G.Sr.data() + j * Lp;
          T* dM = G.dM.data();
#pragma omp simd
          for (int64_t i = 0; i <= j; ++i) dM[i] = dsr[i] * srr[i];
          through_M(static_cast<int>(j), dM);
          // dSr = dS o M (M = S / Sr is not used: Sr may be 0).
          const T* dec = G.dec.data();
          const T* w = W.w.data();
#pragma omp simd
          for (int64_t i = 0; i < j; ++i) dsr[i] *= dec[i] * w[i];
          dsr[j] *= W.g[j];
          zero_row(dsr + j + 1, Lp - j - 1);
        }
        // ---- dV = S^T dO + diag(m) K dHt + D dO ----
        gemm<T, false>(Lc, Pp, Lc, W.S.data(), 1, Lp, G.dO.data(), Pp, G.dV.data(), Pp);
        gemm<T, false>(Lc, Pp, N, W.K.data(), Np, 1, G.dHt.data(), Pp, G.X.data(), Pp);
        // dm_i = <(K dHt)_i, v_i> enters row Lc - 1 of dM.
        T* dmv = G.dM.data();
        for (int64_t i = 0; i < Lc; ++i) {
          const T* xr = G.X.data() + i * Pp;
          const T* vr = W.V.data() + i * Pp;
          T* dvr = G.dV.data() + i * Pp;
          const T* dor = G.dO.data() + i * Pp;
          const T mi = W.m[i];
          T acc = 0;
#pragma omp simd reduction(+ : acc)
          for (int64_t p = 0; p < P; ++p) {
            acc += xr[p] * vr[p];
            dvr[p] += mi * xr[p] + Dh * dor[p];
          }
          dmv[i] = acc;
        }
        through_M(static_cast<int>(Lc - 1), dmv);
        // ---- dQ = dSr K + diag(E) dO H0'; dE_j = <(dO H0')_j, q_j> ----
        gemm<T, false>(Lc, Np, Lc, G.dS.data(), Lp, 1, W.K.data(), Np, G.dQ.data(), Np);
        gemm<T, false>(Lc, Np, P, G.dO.data(), Pp, 1, G.Hp.data(), Np, G.X.data(), Np);
        for (int64_t j = 0; j < Lc; ++j) {
          const T* xr = G.X.data() + j * Np;
          const T* qr = W.Q.data() + j * Np;
          T* dqr = G.dQ.data() + j * Np;
          const T Ej = W.E[j];
          T acc = 0;
#pragma omp simd reduction(+ : acc)
          for (int64_t n = 0; n < N; ++n) {
            acc += xr[n] * qr[n];
            dqr[n] += Ej * xr[n];
          }
          G.dE[j] += acc;
        }
        // ---- dK = dSr^T Q + diag(m) V dH ----
        transpose(G.dHt.data(), Pp, N, P, G.dH.data(), Np);
        gemm<T, false>(Lc, Np, Lc, G.dS.data(), 1, Lp, W.Q.data(), Np, G.dK.data(), Np);
        gemm<T, false>(Lc, Np, P, W.V.data(), Pp, 1, G.dH.data(), Np, G.X.data(), Np);
        for (int64_t i = 0; i < Lc; ++i) {
          const T mi = W.m[i];
          T* dkr = G.dK.data() + i * Np;
          const T* xr = G.X.data() + i * Np;
#pragma omp simd
          for (int64_t n = 0; n < N; ++n) dkr[n] += mi * xr[n];
        }
        // ---- dH0' = Q^T diag(E) dO + E_{L-1} dH_end; dE_{L-1} += <dH_end, H0'> ----
        gemm<T, false>(N, Pp, Lc, W.Q.data(), 1, Np, G.EdO.data(), Pp, G.dHt0.data(), Pp);
        const T El = W.E[Lc - 1];
        for (int64_t n = 0; n < N; ++n) {
          const T* dhr = G.dHt.data() + n * Pp;
          T* d0 = G.dHt0.data() + n * Pp;
#pragma omp simd
          for (int64_t p = 0; p < P; ++p) d0[p] += El * dhr[p];
        }
        T hdot = 0;  // <dH_end, H0'> over dH [P, N] and H0' [P, N]
        for (int64_t p = 0; p < P; ++p) {
          const T* dhr = G.dH.data() + p * Np;
          const T* hr = G.Hp.data() + p * Np;
#pragma omp simd reduction(+ : hdot)
          for (int64_t n = 0; n < N; ++n) hdot += dhr[n] * hr[n];
        }
        G.dE[Lc - 1] += hdot;
        for (int64_t j = 0; j < Lc; ++j) G.dc[j] += G.dE[j] * W.E[j];
        // ---- H0' = H0 + e_0 v_-1 k_-1^T: into k_-1, v_-1, e_0 ----
        std::fill(G.dvv.begin(), G.dvv.end(), T(0));
        T de0 = 0;
        for (int64_t n = 0; n < N; ++n) {
          const T* d0 = G.dHt0.data() + n * Pp;
          const T kn = W.kp[n];
          const T* vp = W.vp.data();
          T* dvv = G.dvv.data();
          T acc = 0;
#pragma omp simd reduction(+ : acc)
          for (int64_t p = 0; p < P; ++p) {
            acc += d0[p] * vp[p];
            dvv[p] += d0[p] * kn;
          }
          G.dqv[n] = e0 * acc;  // dk_-1
          de0 += kn * acc;
        }
        // The last step's k and v also feed the next chunk (or the final state).
        for (int64_t n = 0; n < N; ++n) G.dK[(Lc - 1) * Np + n] += dkc[n];
        for (int64_t p = 0; p < P; ++p) G.dV[(Lc - 1) * Pp + p] += dvc[p];
        for (int64_t n = 0; n < N; ++n) dkc[n] = G.dqv[n];
        for (int64_t p = 0; p < P; ++p) dvc[p] = e0 * G.dvv[p];
        std::swap(G.dHt, G.dHt0);
        // ---- Gates: w_i = g_i + e_{i+1}; c = cumsum(a); g = s dt; e = (1 - s) dt ----
        for (int64_t i = 0; i + 1 < Lc; ++i) {
          G.dg[i] += G.dw[i];
          G.de[i + 1] += G.dw[i];
        }
        G.de[0] += de0;
        T da = 0;
        for (int64_t j = Lc - 1; j >= 0; --j) {
          const int64_t r = row(j);
          da += G.dc[j];
          dadt[r] = da;
          const T sgv = W.sg[j], dtv = W.dt[j];
          const T dsg = (G.dg[j] - G.de[j]) * dtv;
          ddt[r] = G.dg[j] * sgv + G.de[j] * (T(1) - sgv);
          dtrap[r] = dsg * sgv * (T(1) - sgv);
          const T* dvr = G.dV.data() + j * Pp;
          copy_row(dvr, P, dv + r * P);
        }
        // ---- Rotation and angle state, last step first ----
        for (int64_t j = Lc - 1; j >= 0; --j) {
          const int64_t r = row(j);
          const T dtv = W.dt[j];
          const T *csr = G.csb.data() + j * R, *snr = G.snb.data() + j * R;
          const T *dqr = G.dQ.data() + j * Np, *dkr = G.dK.data() + j * Np;
          const T *qrp = W.Q.data() + j * Np, *krp = W.K.data() + j * Np;
          T* dqo = dq + r * N;
          T* dko = dk + r * N;
          const T* ar = ang + r * R;
          T* thp = W.th.data();
#pragma omp simd
          for (int64_t i = 0; i < R; ++i) thp[i] = math::tanh(ar[i]);
          T ddt_ang = 0;
          // One pair per lane (the pairs' elements de-interleaved by the
          // compiler); it was a scalar loop.
#pragma omp simd reduction(+ : ddt_ang)
          for (int64_t i = 0; i < R; ++i) {
            const T c_ = csr[i], s_ = snr[i];
            const T a0 = dqr[2 * i], a1 = dqr[2 * i + 1], b0 = dkr[2 * i], b1 = dkr[2 * i + 1];
            dqo[2 * i] = a0 * c_ + a1 * s_;
            dqo[2 * i + 1] = -a0 * s_ + a1 * c_;
            dko[2 * i] = b0 * c_ + b1 * s_;
            dko[2 * i + 1] = -b0 * s_ + b1 * c_;
            const T dth = -a0 * qrp[2 * i + 1] + a1 * qrp[2 * i] - b0 * krp[2 * i + 1] + b1 * krp[2 * i] + dthc[i];
            const T tn = thp[i];
            ddt_ang += dth * T(kPi) * tn;
            dang[r * R + i] = dth * dtv * T(kPi) * (T(1) - tn * tn);
            dthc[i] = dth;
          }
          copy_row(dqr + 2 * R, N - 2 * R, dqo + 2 * R);
          copy_row(dkr + 2 * R, N - 2 * R, dko + 2 * R);
#pragma omp simd
          for (int64_t n = 0; n < N; ++n) {
            pq[n] += dqo[n];
            pk[n] += dko[n];
          }
          ddt[r] += ddt_ang;
        }
      }
      if (dh0) transpose(G.dHt.data(), Pp, N, P, dh0 + bh * P * N, N);
      if (dk0) std::copy_n(dkc.data(), N, dk0 + bh * N);
      if (dv0) std::copy_n(dvc.data(), P, dv0 + bh * P);
      if (da0) std::copy_n(dthc.data(), R, da0 + bh * R);
    }
  });
  // Sum the partials over the batch, in batch order.
  sum_batch_partials(part.data(), d.B, H, N, mp<T>(gr.dq_bias), mp<T>(gr.dk_bias), mp<T>(gr.dD));
}

}  // namespace

void mamba3_scan_forward_chunked(const Mamba3Scan& s) {
  dispatch_only<float, double>(s.q.dtype(), [&](auto tag) { forward_chunked_t<typename decltype(tag)::type>(s); },
                               "mamba3_scan");
}

void mamba3_scan_backward_chunked(const Mamba3Scan& s, const Mamba3ScanGrads& g) {
  dispatch_only<float, double>(s.q.dtype(),
                               [&](auto tag) { backward_chunked_t<typename decltype(tag)::type>(s, g); },
                               "mamba3_scan");
}

}  // namespace kiln::backend::cpu::KILN_ISA_NS
