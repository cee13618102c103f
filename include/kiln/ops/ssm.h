// The Mamba-3 SISO scan (SPECS G2; docs/ssm.md): the selective state-space
// recurrence of state-spaces/mamba's Mamba-3 with its exponential-trapezoidal
// update and data-dependent rotary angles, as one differentiable op with a
// fused backward. Letters: B batch, T time, H heads, N state size (d_state),
// P head dim, R rotary angle pairs (R <= N / 2).
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln {

/// The scan's recurrent state per (batch, head): angle [B, H, R] (the
/// accumulated rotary angles, in [0, 2 pi)), h [B, H, P, N], k [B, H, N] (the
/// last step's rotated key, B + bias), v [B, H, P] (the last step's x).
/// All four undefined: the zero state.
struct Mamba3State {
  Tensor angle, h, k, v;
  bool defined() const { return h.defined(); }
};

struct Mamba3ScanResult {
  Tensor y;           // [B, T, H, P]
  Mamba3State state;  // after the last step
};

/// How mamba3_scan computes: `sequential` runs the recurrence step by step
/// (what `step` uses; T calls of one step equal one call of T steps bit for
/// bit); `chunked` the chunked matrix form (chunks of `chunk` steps, block
/// products inside a chunk, the state carried between chunks; equal within
/// rounding); `automatic` picks chunked for T >= 16, else sequential.
enum class Mamba3ScanAlgo { automatic, sequential, chunked };

/// Runs T steps of, per (b, h) (upstream's mamba3_siso_step_ref):
///   theta  = (theta + pi tanh(angles_t) dt_t) mod 2 pi
///   qr, kr = rot(q_t + q_bias, theta), rot(k_t + k_bias, theta)   (pairs (2i, 2i+1), i < R)
///   s = sigmoid(trap_t), alpha = exp(adt_t), beta = (1 - s) dt_t alpha, gamma = s dt_t
///   h      = alpha h + beta v_{t-1} k_{t-1}^T + gamma v_t kr^T      (k_{t-1}: the previous kr)
///   y_t    = (h qr + D v_t) * silu(z_t)
/// q, k [B, T, H, N] (Mamba's C and B); v [B, T, H, P] (x); adt, dt, trap
/// [B, T, H] (A dt, dt > 0, the trapezoid logit); q_bias, k_bias [H, N];
/// angles [B, T, H, R] (pre-tanh); D [H] and z [B, T, H, P] optional
/// (undefined: no skip / no gate); `initial`: the state to start from.
/// f32 or f64, all one dtype, CPU. Differentiable in every tensor argument
/// (including the initial state) and through the returned state; no second
/// derivative. `chunk`: how many steps share one stored state for backward
/// (memory B H ceil(T / chunk) P N), and the chunked form's chunk length.
/// Results do not depend on the thread count; under `sequential` a call with
/// T steps equals T calls of one step bit for bit.
///   auto [y, st] = mamba3_scan(C, Bm, x, adt, dt, trap, c_bias, b_bias, ang, D, z);
Mamba3ScanResult mamba3_scan(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& adt, const Tensor& dt,
                             const Tensor& trap, const Tensor& q_bias, const Tensor& k_bias, const Tensor& angles,
                             const Tensor& D = {}, const Tensor& z = {}, const Mamba3State& initial = {},
                             int64_t chunk = 32, Mamba3ScanAlgo algo = Mamba3ScanAlgo::automatic);

/// The same computed by the reference kernel (f64 loops, every state kept;
/// no autograd): what tests hold mamba3_scan to.
Mamba3ScanResult mamba3_scan_reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& adt,
                                       const Tensor& dt, const Tensor& trap, const Tensor& q_bias,
                                       const Tensor& k_bias, const Tensor& angles, const Tensor& D = {},
                                       const Tensor& z = {}, const Mamba3State& initial = {});

}  // namespace kiln
