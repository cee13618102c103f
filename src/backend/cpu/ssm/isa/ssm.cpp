// CPU kernels of the Mamba-3 scan (contracts and math in ../ssm.h): one
// (batch, head) pair per task, the recurrence sequential in time, every inner
// loop a straight-line loop over the state size N (or over the head dim P)
// that the compiler vectorises. Each (b, h) pair is computed by one thread in
// a fixed order and the parameter gradients are summed over the batch after
// the parallel region, in batch order, so results are bitwise the same on any
// thread count. Compiled once per kernel ISA (NOTE [Per-ISA kernels] in
// CMakeLists.txt); the reference kernels are in ../ssm_ref.cpp.
#include "src/backend/cpu/ssm/isa/ssm.h"
#include "src/backend/cpu/ssm/isa/scan_common.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kiln/core/parallel.h"
#include "src/backend/cpu/dispatch.h"
#include "src/backend/cpu/elementwise/elementwise_math.h"

namespace kiln::backend::cpu::KILN_ISA_NS {

namespace {

using namespace scan;

template <class T>
void forward_t(const Mamba3Scan& s) {
  const Dims d = dims_of(s);
  const int64_t N = d.N, P = d.P, R = d.R, H = d.H;
  const T *q = cp<T>(s.q), *k = cp<T>(s.k), *v = cp<T>(s.v), *adt = cp<T>(s.adt), *dt = cp<T>(s.dt),
          *trap = cp<T>(s.trap), *qb = cp<T>(s.q_bias), *kb = cp<T>(s.k_bias), *ang = cp<T>(s.angles),
          *D = cp<T>(s.D), *z = cp<T>(s.z), *a0 = cp<T>(s.angle0), *h0 = cp<T>(s.h0), *k0 = cp<T>(s.k0),
          *v0 = cp<T>(s.v0);
  T *y = mp<T>(s.y), *aT = mp<T>(s.angle_T), *hT = mp<T>(s.h_T), *kT = mp<T>(s.k_T), *vT = mp<T>(s.v_T),
    *th_all = mp<T>(s.theta_all), *ckpt = mp<T>(s.h_ckpt), *o_all = mp<T>(s.o_all);
  parallel_for(0, d.B * H, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> theta(R), cs(R), sn(R), kp(N), vp(P), qr(N), kr(N), ob(P), th(R);
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t b = bh / H, hh = bh % H;
      // The state lives in the output h_T, updated in place.
      T* h = hT + bh * P * N;
      if (h0) {
        std::copy_n(a0 + bh * R, R, theta.data());
        std::copy_n(h0 + bh * P * N, P * N, h);
        std::copy_n(k0 + bh * N, N, kp.data());
        std::copy_n(v0 + bh * P, P, vp.data());
      } else {
        std::fill(theta.begin(), theta.end(), T(0));
        std::fill_n(h, P * N, T(0));
        std::fill(kp.begin(), kp.end(), T(0));
        std::fill(vp.begin(), vp.end(), T(0));
      }
      const T Dh = D ? D[hh] : T(0);
      for (int64_t t = 0; t < d.T; ++t) {
        const int64_t r = (b * d.T + t) * H + hh;  // row of [B, T, H]
        const T dtv = dt[r];
        const T* ar = ang + r * R;
        T* thp = th.data();
#pragma omp simd
        for (int64_t i = 0; i < R; ++i) thp[i] = math::tanh(ar[i]);  // vectorised (f32)
        T *thv = theta.data(), *csv = cs.data(), *snv = sn.data();
#pragma omp simd
        for (int64_t i = 0; i < R; ++i) {
          thv[i] = wrap<T>(thv[i] + T(kPi) * thp[i] * dtv);
          sin_cos(thv[i], snv[i], csv[i]);
        }
        if (th_all) std::copy_n(theta.data(), R, th_all + r * R);
        if (ckpt && t % d.chunk == 0) std::copy_n(h, P * N, ckpt + (bh * d.nc + t / d.chunk) * P * N);
        rotate(q + qk_row(d, r) * N, qb + hh * N, cs.data(), sn.data(), N, R, qr.data());
        rotate(k + qk_row(d, r) * N, kb + hh * N, cs.data(), sn.data(), N, R, kr.data());
        const Gates<T> g(adt[r], dtv, trap[r]);
        const T* vr = v + r * P;
        const T *kpp = kp.data(), *krp = kr.data(), *qrp = qr.data();
        for (int64_t p = 0; p < P; ++p) {
          const T bv = g.beta * vp[p], gv = g.gamma * vr[p];
          T* hr = h + p * N;
          T acc = 0;
#pragma omp simd reduction(+ : acc)
          for (int64_t n = 0; n < N; ++n) {
            const T hn = g.alpha * hr[n] + bv * kpp[n] + gv * krp[n];
            hr[n] = hn;
            acc += hn * qrp[n];
          }
          ob[p] = acc + Dh * vr[p];
        }
        // The gate in one straight loop over P (math::sigmoid vectorises for f32).
        T* yr = y + r * P;
        const T* obp = ob.data();
        if (z) {
          const T* zr = z + r * P;
#pragma omp simd
          for (int64_t p = 0; p < P; ++p) yr[p] = obp[p] * zr[p] * math::sigmoid(zr[p]);
        } else {
          std::copy_n(obp, P, yr);
        }
        if (o_all) std::copy_n(obp, P, o_all + r * P);
        std::copy_n(kr.data(), N, kp.data());
        std::copy_n(vr, P, vp.data());
      }
      std::copy_n(theta.data(), R, aT + bh * R);
      std::copy_n(kp.data(), N, kT + bh * N);
      std::copy_n(vp.data(), P, vT + bh * P);
    }
  });
}

template <class T>
void backward_t(const Mamba3Scan& s, const Mamba3ScanGrads& gr) {
  const Dims d = dims_of(s);
  const int64_t N = d.N, P = d.P, R = d.R, H = d.H, C = d.chunk;
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
    std::vector<T> hbuf((C + 1) * P * N), qbuf(C * N), kbuf((C + 1) * N), G(P * N), dkc(N), dvc(P), dthc(R),
        cs(R), sn(R), vstart(P), o(P), dov(P), dqr(N), dkr(N), gtv(N), gtvp(N), dvc_new(P), csb(C * R),
        snb(C * R), sgz(P), thn(R);
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t b = bh / H, hh = bh % H;
      T* pq = part.data() + bh * (2 * N + 1);
      T* pk = pq + N;
      T& pD = pk[N];
      std::copy_n(dhT + bh * P * N, P * N, G.data());
      std::copy_n(dkT + bh * N, N, dkc.data());
      std::copy_n(dvT + bh * P, P, dvc.data());
      std::copy_n(daT + bh * R, R, dthc.data());
      const T Dh = D ? D[hh] : T(0);
      auto row = [&](int64_t t) { return (b * d.T + t) * H + hh; };
      auto trig = [&](int64_t r) {
        const T* thr = th_all + r * R;
        T *csv = cs.data(), *snv = sn.data();
#pragma omp simd
        for (int64_t i = 0; i < R; ++i) sin_cos(thr[i], snv[i], csv[i]);
      };
      for (int64_t c = d.nc - 1; c >= 0; --c) {
        const int64_t t0 = c * C, L = std::min(d.T, t0 + C) - t0;
        // Recompute the chunk: hbuf[j] is the state before step t0 + j,
        // kbuf[j] the k_prev of step t0 + j, qbuf[j] its rotated q.
        std::copy_n(ckpt + (bh * d.nc + c) * P * N, P * N, hbuf.data());
        if (t0 == 0) {
          if (k0) std::copy_n(k0 + bh * N, N, kbuf.data()), std::copy_n(v0 + bh * P, P, vstart.data());
          else std::fill_n(kbuf.data(), N, T(0)), std::fill(vstart.begin(), vstart.end(), T(0));
        } else {
          const int64_t r = row(t0 - 1);
          trig(r);
          rotate(k + qk_row(d, r) * N, kb + hh * N, cs.data(), sn.data(), N, R, kbuf.data());
          std::copy_n(v + r * P, P, vstart.data());
        }
        for (int64_t j = 0; j < L; ++j) {
          const int64_t r = row(t0 + j);
          trig(r);
          std::copy_n(cs.data(), R, csb.data() + j * R);  // kept for the adjoint's rotation
          std::copy_n(sn.data(), R, snb.data() + j * R);
          rotate(q + qk_row(d, r) * N, qb + hh * N, cs.data(), sn.data(), N, R, qbuf.data() + j * N);
          rotate(k + qk_row(d, r) * N, kb + hh * N, cs.data(), sn.data(), N, R, kbuf.data() + (j + 1) * N);
          const Gates<T> g(adt[r], dt[r], trap[r]);
          const T* vr = v + r * P;
          const T* vpr = j == 0 ? vstart.data() : v + row(t0 + j - 1) * P;
          const T *kpp = kbuf.data() + j * N, *krp = kbuf.data() + (j + 1) * N;
          const T* hp = hbuf.data() + j * P * N;
          T* hn = hbuf.data() + (j + 1) * P * N;
          for (int64_t p = 0; p < P; ++p) {
            const T bv = g.beta * vpr[p], gv = g.gamma * vr[p];
#pragma omp simd
            for (int64_t n = 0; n < N; ++n) hn[p * N + n] = g.alpha * hp[p * N + n] + bv * kpp[n] + gv * krp[n];
          }
        }
        // The adjoint, steps t1 - 1 down to t0. G is dL/dh_t on entry to step t.
        for (int64_t j = L - 1; j >= 0; --j) {
          const int64_t t = t0 + j, r = row(t);
          const T dtv = dt[r];
          const Gates<T> g(adt[r], dtv, trap[r]);
          const T* vr = v + r * P;
          const T* vpr = j == 0 ? vstart.data() : v + row(t - 1) * P;
          const T *kpp = kbuf.data() + j * N, *krp = kbuf.data() + (j + 1) * N, *qrp = qbuf.data() + j * N;
          const T *hp = hbuf.data() + j * P * N, *ht = hbuf.data() + (j + 1) * P * N;
          // o = h_t qr + D v (saved by forward, else recomputed) and the gate's gradients.
          T* op = o.data();
          if (o_all) {
            std::copy_n(o_all + r * P, P, op);
          } else {
            for (int64_t p = 0; p < P; ++p) {
              T acc = 0;
              const T* hr = ht + p * N;
#pragma omp simd reduction(+ : acc)
              for (int64_t n = 0; n < N; ++n) acc += hr[n] * qrp[n];
              op[p] = acc + Dh * vr[p];
            }
          }
          const T* gyr = dy + r * P;
          T* dovp = dov.data();
          if (z) {
            const T* zr = z + r * P;
            T* dzr = dz + r * P;
            T* sgp = sgz.data();
#pragma omp simd
            for (int64_t p = 0; p < P; ++p) sgp[p] = math::sigmoid(zr[p]);
#pragma omp simd
            for (int64_t p = 0; p < P; ++p) {
              dzr[p] = gyr[p] * op[p] * sgp[p] * (T(1) + zr[p] * (T(1) - sgp[p]));
              dovp[p] = gyr[p] * zr[p] * sgp[p];
            }
          } else {
            std::copy_n(gyr, P, dovp);
          }
          T dDs = 0;
          for (int64_t p = 0; p < P; ++p) dDs += dovp[p] * vr[p];
          pD += dDs;
          std::fill(dqr.begin(), dqr.end(), T(0));
          std::fill(gtv.begin(), gtv.end(), T(0));
          std::fill(gtvp.begin(), gtvp.end(), T(0));
          T dalpha = 0, dbeta = 0, dgamma = 0;
          T *dqrp = dqr.data(), *gtvq = gtv.data(), *gtvpq = gtvp.data();
          for (int64_t p = 0; p < P; ++p) {
            T* Gr = G.data() + p * N;
            const T* hr = ht + p * N;
            const T* hpr = hp + p * N;
            const T dop = dov[p], vt = vr[p], vpv = vpr[p];
            T gk = 0, gkp = 0, gh = 0;
#pragma omp simd reduction(+ : gk, gkp, gh)
            for (int64_t n = 0; n < N; ++n) {
              const T gn = Gr[n] + dop * qrp[n];  // dL/dh_t
              gk += gn * krp[n];
              gkp += gn * kpp[n];
              gh += gn * hpr[n];
              gtvq[n] += gn * vt;
              gtvpq[n] += gn * vpv;
              dqrp[n] += hr[n] * dop;
              Gr[n] = g.alpha * gn;  // dL/dh_{t-1}
            }
            dalpha += gh;
            dbeta += vpv * gkp;
            dgamma += vt * gk;
            dv[r * P + p] = Dh * dop + dvc[p] + g.gamma * gk;
            dvc_new[p] = g.beta * gkp;
          }
          std::copy(dvc_new.begin(), dvc_new.end(), dvc.begin());
          for (int64_t n = 0; n < N; ++n) {
            dkr[n] = g.gamma * gtv[n] + dkc[n];
            dkc[n] = g.beta * gtvp[n];
          }
          // Through the rotation: d(in) = rot^T d(out), dtheta from both q and k.
          const T *csr = csb.data() + j * R, *snr = snb.data() + j * R;
          T* dqo = dq + r * N;
          T* dko = dk + r * N;
          T ddt_ang = 0;
          const T* ar = ang + r * R;
          T* thp = thn.data();
#pragma omp simd
          for (int64_t i = 0; i < R; ++i) thp[i] = math::tanh(ar[i]);
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
          for (int64_t n = 2 * R; n < N; ++n) {
            dqo[n] = dqr[n];
            dko[n] = dkr[n];
          }
          for (int64_t n = 0; n < N; ++n) {
            pq[n] += dqo[n];
            pk[n] += dko[n];
          }
          const T dalpha_tot = dalpha + dbeta * (T(1) - g.s) * dtv;
          dadt[r] = dalpha_tot * g.alpha;
          ddt[r] = dbeta * (T(1) - g.s) * g.alpha + dgamma * g.s + ddt_ang;
          const T ds = -dbeta * dtv * g.alpha + dgamma * dtv;
          dtrap[r] = ds * g.s * (T(1) - g.s);
        }
      }
      if (dh0) std::copy_n(G.data(), P * N, dh0 + bh * P * N);
      if (dk0) std::copy_n(dkc.data(), N, dk0 + bh * N);
      if (dv0) std::copy_n(dvc.data(), P, dv0 + bh * P);
      if (da0) std::copy_n(dthc.data(), R, da0 + bh * R);
    }
  });
  // Sum the partials over the batch, in batch order.
  sum_batch_partials(part.data(), d.B, H, N, mp<T>(gr.dq_bias), mp<T>(gr.dk_bias), mp<T>(gr.dD));
}

}  // namespace

void mamba3_scan_forward(const Mamba3Scan& s) {
  dispatch_only<float, double>(s.q.dtype(), [&](auto tag) { forward_t<typename decltype(tag)::type>(s); },
                               "mamba3_scan");
}

void mamba3_scan_backward(const Mamba3Scan& s, const Mamba3ScanGrads& g) {
  dispatch_only<float, double>(s.q.dtype(), [&](auto tag) { backward_t<typename decltype(tag)::type>(s, g); },
                               "mamba3_scan");
}

}  // namespace kiln::backend::cpu::KILN_ISA_NS
