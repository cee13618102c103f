// The Mamba-3 scan's reference kernels: plain f64 loops over one (b, h) pair
// at a time that keep every step's state (h_t, theta_t, the rotated q and k),
// the oracle the fast kernels in isa/ssm.cpp are held to.
#include <cmath>
#include <vector>

#include "src/backend/cpu/dispatch.h"
#include "src/backend/cpu/ssm/ssm.h"

namespace kiln::backend::cpu::ref {

namespace {

constexpr double kPi = 3.14159265358979323846;

// Reads/writes element i of a contiguous f32/f64 tensor as double.
double at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::f32 ? static_cast<const float*>(t.data_ptr())[i]
                                 : static_cast<const double*>(t.data_ptr())[i];
}
void put(const Tensor& t, int64_t i, double x) {
  if (!t.defined()) return;
  if (t.dtype() == DType::f32) static_cast<float*>(t.data_ptr())[i] = static_cast<float>(x);
  else static_cast<double*>(t.data_ptr())[i] = x;
}

struct Trace {
  // Per step t (index t + 1; index 0 is the initial state): h [P][N], k_rot [N], v [P], theta [R].
  std::vector<std::vector<double>> h, kr, v, th, qr;
  std::vector<double> o;  // [T][P] before the gate
};

// Runs the recurrence of one (b, h) pair, keeping every state.
Trace run(const Mamba3Scan& s, int64_t b, int64_t hh) {
  const int64_t T = s.q.shape()[1], H = s.q.shape()[2], N = s.q.shape()[3], P = s.v.shape()[3],
                R = s.angles.shape()[3];
  const int64_t bh = b * H + hh;
  Trace tr;
  tr.h.assign(T + 1, std::vector<double>(P * N, 0.0));
  tr.kr.assign(T + 1, std::vector<double>(N, 0.0));
  tr.qr.assign(T + 1, std::vector<double>(N, 0.0));
  tr.v.assign(T + 1, std::vector<double>(P, 0.0));
  tr.th.assign(T + 1, std::vector<double>(R, 0.0));
  tr.o.assign(T * P, 0.0);
  if (s.h0.defined()) {
    for (int64_t i = 0; i < P * N; ++i) tr.h[0][i] = at(s.h0, bh * P * N + i);
    for (int64_t n = 0; n < N; ++n) tr.kr[0][n] = at(s.k0, bh * N + n);
    for (int64_t p = 0; p < P; ++p) tr.v[0][p] = at(s.v0, bh * P + p);
    for (int64_t i = 0; i < R; ++i) tr.th[0][i] = at(s.angle0, bh * R + i);
  }
  for (int64_t t = 0; t < T; ++t) {
    const int64_t r = (b * T + t) * H + hh;
    const double dt = at(s.dt, r);
    for (int64_t i = 0; i < R; ++i) {
      const double x = tr.th[t][i] + kPi * std::tanh(at(s.angles, r * R + i)) * dt;
      tr.th[t + 1][i] = x - 2 * kPi * std::floor(x / (2 * kPi));
    }
    for (int64_t n = 0; n < N; ++n) {
      tr.qr[t + 1][n] = at(s.q, r * N + n) + at(s.q_bias, hh * N + n);
      tr.kr[t + 1][n] = at(s.k, r * N + n) + at(s.k_bias, hh * N + n);
    }
    for (int64_t i = 0; i < R; ++i) {
      const double c = std::cos(tr.th[t + 1][i]), sn = std::sin(tr.th[t + 1][i]);
      for (auto* x : {&tr.qr[t + 1], &tr.kr[t + 1]}) {
        const double x0 = (*x)[2 * i], x1 = (*x)[2 * i + 1];
        (*x)[2 * i] = x0 * c - x1 * sn;
        (*x)[2 * i + 1] = x0 * sn + x1 * c;
      }
    }
    for (int64_t p = 0; p < P; ++p) tr.v[t + 1][p] = at(s.v, r * P + p);
    const double sg = 1 / (1 + std::exp(-at(s.trap, r))), alpha = std::exp(at(s.adt, r));
    const double beta = (1 - sg) * dt * alpha, gamma = sg * dt;
    for (int64_t p = 0; p < P; ++p)
      for (int64_t n = 0; n < N; ++n)
        tr.h[t + 1][p * N + n] = alpha * tr.h[t][p * N + n] + beta * tr.v[t][p] * tr.kr[t][n] +
                                 gamma * tr.v[t + 1][p] * tr.kr[t + 1][n];
    for (int64_t p = 0; p < P; ++p) {
      double acc = 0;
      for (int64_t n = 0; n < N; ++n) acc += tr.h[t + 1][p * N + n] * tr.qr[t + 1][n];
      if (s.D.defined()) acc += at(s.D, hh) * tr.v[t + 1][p];
      tr.o[t * P + p] = acc;
    }
  }
  return tr;
}

}  // namespace

void mamba3_scan_forward(const Mamba3Scan& s) {
  const int64_t B = s.q.shape()[0], T = s.q.shape()[1], H = s.q.shape()[2], N = s.q.shape()[3],
                P = s.v.shape()[3], R = s.angles.shape()[3];
  for (int64_t b = 0; b < B; ++b)
    for (int64_t hh = 0; hh < H; ++hh) {
      const Trace tr = run(s, b, hh);
      const int64_t bh = b * H + hh;
      for (int64_t t = 0; t < T; ++t)
        for (int64_t p = 0; p < P; ++p) {
          const int64_t i = ((b * T + t) * H + hh) * P + p;
          double y = tr.o[t * P + p];
          if (s.z.defined()) {
            const double z = at(s.z, i);
            y *= z / (1 + std::exp(-z));
          }
          put(s.y, i, y);
        }
      for (int64_t i = 0; i < P * N; ++i) put(s.h_T, bh * P * N + i, tr.h[T][i]);
      for (int64_t n = 0; n < N; ++n) put(s.k_T, bh * N + n, tr.kr[T][n]);
      for (int64_t p = 0; p < P; ++p) put(s.v_T, bh * P + p, tr.v[T][p]);
      for (int64_t i = 0; i < R; ++i) put(s.angle_T, bh * R + i, tr.th[T][i]);
    }
}

void mamba3_scan_backward(const Mamba3Scan& s, const Mamba3ScanGrads& g) {
  const int64_t B = s.q.shape()[0], T = s.q.shape()[1], H = s.q.shape()[2], N = s.q.shape()[3],
                P = s.v.shape()[3], R = s.angles.shape()[3];
  std::vector<double> gqb(H * N, 0.0), gkb(H * N, 0.0), gD(H, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t hh = 0; hh < H; ++hh) {
      const Trace tr = run(s, b, hh);
      const int64_t bh = b * H + hh;
      // Adjoints of the state entering step t + 1 (the state after step t).
      std::vector<double> gh(P * N), gk(N), gv(P), gth(R);
      for (int64_t i = 0; i < P * N; ++i) gh[i] = at(g.d_h_T, bh * P * N + i);
      for (int64_t n = 0; n < N; ++n) gk[n] = at(g.d_k_T, bh * N + n);
      for (int64_t p = 0; p < P; ++p) gv[p] = at(g.d_v_T, bh * P + p);
      for (int64_t i = 0; i < R; ++i) gth[i] = at(g.d_angle_T, bh * R + i);
      for (int64_t t = T - 1; t >= 0; --t) {
        const int64_t r = (b * T + t) * H + hh;
        const double dt = at(s.dt, r), sg = 1 / (1 + std::exp(-at(s.trap, r))), alpha = std::exp(at(s.adt, r));
        const double beta = (1 - sg) * dt * alpha, gamma = sg * dt;
        const double Dh = s.D.defined() ? at(s.D, hh) : 0.0;
        // y = o silu(z)
        std::vector<double> go(P);
        for (int64_t p = 0; p < P; ++p) {
          const double gy = at(g.dy, r * P + p);
          if (s.z.defined()) {
            const double z = at(s.z, r * P + p), sz = 1 / (1 + std::exp(-z));
            go[p] = gy * z * sz;
            put(g.dz, r * P + p, gy * tr.o[t * P + p] * (sz + z * sz * (1 - sz)));
          } else {
            go[p] = gy;
          }
          gD[hh] += go[p] * tr.v[t + 1][p];
        }
        // o = h_t qr + D v: into h_t, qr, v.
        std::vector<double> gqr(N, 0.0), gkr(gk), gvt(gv);
        for (int64_t p = 0; p < P; ++p) {
          gvt[p] += Dh * go[p];
          for (int64_t n = 0; n < N; ++n) {
            gh[p * N + n] += go[p] * tr.qr[t + 1][n];
            gqr[n] += go[p] * tr.h[t + 1][p * N + n];
          }
        }
        // h_t = alpha h_{t-1} + beta v_{t-1} k_{t-1}^T + gamma v_t k_t^T.
        double galpha = 0, gbeta = 0, ggamma = 0;
        std::vector<double> gkprev(N, 0.0), gvprev(P, 0.0);
        for (int64_t p = 0; p < P; ++p)
          for (int64_t n = 0; n < N; ++n) {
            const double G = gh[p * N + n];
            galpha += G * tr.h[t][p * N + n];
            gbeta += G * tr.v[t][p] * tr.kr[t][n];
            ggamma += G * tr.v[t + 1][p] * tr.kr[t + 1][n];
            gkprev[n] += beta * G * tr.v[t][p];
            gvprev[p] += beta * G * tr.kr[t][n];
            gkr[n] += gamma * G * tr.v[t + 1][p];
            gvt[p] += gamma * G * tr.kr[t + 1][n];
          }
        for (int64_t p = 0; p < P; ++p) put(g.dv, r * P + p, gvt[p]);
        // Rotation: qr = rot(qb, theta).
        std::vector<double> gqb_t(gqr), gkb_t(gkr), gtheta(gth);
        for (int64_t i = 0; i < R; ++i) {
          const double c = std::cos(tr.th[t + 1][i]), sn = std::sin(tr.th[t + 1][i]);
          gqb_t[2 * i] = c * gqr[2 * i] + sn * gqr[2 * i + 1];
          gqb_t[2 * i + 1] = -sn * gqr[2 * i] + c * gqr[2 * i + 1];
          gkb_t[2 * i] = c * gkr[2 * i] + sn * gkr[2 * i + 1];
          gkb_t[2 * i + 1] = -sn * gkr[2 * i] + c * gkr[2 * i + 1];
          gtheta[i] += gqr[2 * i] * -tr.qr[t + 1][2 * i + 1] + gqr[2 * i + 1] * tr.qr[t + 1][2 * i] +
                       gkr[2 * i] * -tr.kr[t + 1][2 * i + 1] + gkr[2 * i + 1] * tr.kr[t + 1][2 * i];
        }
        for (int64_t n = 0; n < N; ++n) {
          put(g.dq, r * N + n, gqb_t[n]);
          put(g.dk, r * N + n, gkb_t[n]);
          gqb[hh * N + n] += gqb_t[n];
          gkb[hh * N + n] += gkb_t[n];
        }
        // theta_t = theta_{t-1} + pi tanh(a) dt (the wrap's steps have no gradient).
        double gdt = gbeta * (1 - sg) * alpha + ggamma * sg;
        for (int64_t i = 0; i < R; ++i) {
          const double th = std::tanh(at(s.angles, r * R + i));
          gdt += gtheta[i] * kPi * th;
          put(g.dangles, r * R + i, gtheta[i] * dt * kPi * (1 - th * th));
        }
        put(g.dadt, r, (galpha + gbeta * (1 - sg) * dt) * alpha);
        put(g.ddt, r, gdt);
        put(g.dtrap, r, (ggamma * dt - gbeta * dt * alpha) * sg * (1 - sg));
        for (int64_t i = 0; i < P * N; ++i) gh[i] *= alpha;
        gk = gkprev;
        gv = gvprev;
        gth = gtheta;
      }
      for (int64_t i = 0; i < P * N; ++i) put(g.d_h0, bh * P * N + i, gh[i]);
      for (int64_t n = 0; n < N; ++n) put(g.d_k0, bh * N + n, gk[n]);
      for (int64_t p = 0; p < P; ++p) put(g.d_v0, bh * P + p, gv[p]);
      for (int64_t i = 0; i < R; ++i) put(g.d_angle0, bh * R + i, gth[i]);
    }
  for (int64_t i = 0; i < H * N; ++i) {
    put(g.dq_bias, i, gqb[i]);
    put(g.dk_bias, i, gkb[i]);
  }
  for (int64_t i = 0; i < H; ++i) put(g.dD, i, gD[i]);
}

}  // namespace kiln::backend::cpu::ref
