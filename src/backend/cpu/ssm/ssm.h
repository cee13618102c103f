// CPU kernels of the Mamba-3 SISO scan (kiln/ops/ssm.h, docs/ssm.md). Inputs
// are checked by src/ops/ssm.cpp and arrive contiguous with one floating
// dtype T (f32 or f64); math runs in T. Letters: B batch, T time, H heads,
// N state size (d_state), P head dim, R rotary angles (<= N / 2).
//
// Per (b, h) and step t, from the state (theta [R], h [P, N], k_prev [N], v_prev [P]):
//   theta  = wrap_{[0, 2pi)}(theta + pi tanh(angles_t) dt_t)
//   qr, kr = rot(q_t + q_bias, theta), rot(k_t + k_bias, theta)   (pairs (2i, 2i+1), i < R)
//   s = sigmoid(trap_t), alpha = exp(adt_t), beta = (1 - s) dt_t alpha, gamma = s dt_t
//   h      = alpha h + beta v_prev k_prev^T + gamma v_t kr^T
//   o      = h qr + D v_t,   y_t = o silu(z_t)  (no D / z: those terms drop)
//   k_prev, v_prev = kr, v_t
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln::backend::cpu {

/// Forward of the scan. Layouts (contiguous): q, k [B, T, H, N] or [B, T, 1, N]
/// (one row for every head: the op passes an expanded q, k so; the
/// reference kernels take [B, T, H, N] only), their gradients [B, T, H, N]; v, z, y
/// [B, T, H, P]; adt, dt, trap [B, T, H]; angles [B, T, H, R]; q_bias, k_bias
/// [H, N]; D [H]; states: angle [B, H, R], h [B, H, P, N], k [B, H, N], v [B, H, P].
/// D, z, and the initial states (all four or none) may be undefined. Writes y
/// and the final states; when theta_all [B, T, H, R] and h_ckpt
/// [B, H, ceil(T / chunk), P, N] are defined it also keeps what backward needs
/// (every step's angle state, the state h before each chunk of `chunk` steps).
struct Mamba3Scan {
  Tensor q, k, v, adt, dt, trap, q_bias, k_bias, angles, D, z;
  Tensor angle0, h0, k0, v0;                   // initial state (undefined: zeros)
  Tensor y, angle_T, h_T, k_T, v_T;            // outputs
  Tensor theta_all, h_ckpt;                    // saved for backward (optional)
  Tensor o_all;  // [B, T, H, P]: h qr + D v before the gate, saved for backward (optional)
  int64_t chunk = 64;
};

/// Gradients of the scan. dy [B, T, H, P] and the final states' gradients
/// (d_angle_T, d_h_T, d_k_T, d_v_T, all defined, zeros when unused) in; every
/// gradient tensor out is written whole (shapes as their inputs); those for D,
/// z and the initial states only when defined.
struct Mamba3ScanGrads {
  Tensor dy, d_angle_T, d_h_T, d_k_T, d_v_T;
  Tensor dq, dk, dv, dadt, ddt, dtrap, dangles, dq_bias, dk_bias, dD, dz;
  Tensor d_angle0, d_h0, d_k0, d_v0;
};

/// Sequential scan, parallel over B x H (each (b, h) on one thread, so results
/// do not depend on the thread count), vectorised over N.
void mamba3_scan_forward(const Mamba3Scan& s);
/// Backward from forward's saved theta_all and h_ckpt (and o_all when
/// defined, else o is recomputed): per chunk (last
/// first) it recomputes the chunk's states from the checkpoint, then runs
/// the recurrence's adjoint backwards through it.
void mamba3_scan_backward(const Mamba3Scan& s, const Mamba3ScanGrads& g);

/// The same two functions in chunked matrix form (NOTE [Mamba-3 chunked
/// scan] in isa/ssm_chunked.cpp): chunks of `chunk` steps, the outputs of a
/// chunk as products of [chunk, N], [chunk, chunk] and [chunk, P] blocks, the
/// state carried from chunk to chunk. Same contracts, same saved tensors
/// (either backward runs from either forward); equal to the sequential kernels
/// within rounding, not bit for bit.
void mamba3_scan_forward_chunked(const Mamba3Scan& s);
void mamba3_scan_backward_chunked(const Mamba3Scan& s, const Mamba3ScanGrads& g);

namespace ref {
/// The reference: f64 loops, one (b, h) at a time, every state kept. theta_all
/// and h_ckpt are not used.
void mamba3_scan_forward(const Mamba3Scan& s);
void mamba3_scan_backward(const Mamba3Scan& s, const Mamba3ScanGrads& g);
}  // namespace ref

}  // namespace kiln::backend::cpu
