// Rotary position embedding (RoPE, Su et al. 2021): rotates feature pairs of
// each sequence row by angles proportional to the row's position.
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln {

struct RotaryOptions {
  double base = 10000;      // theta_i = pos * base^(-2i / rotary_dim)
  int64_t offset = 0;       // position of row t is offset + t (without positions)
  Tensor positions = {};    // optional integer [T]: position of row t (then offset must be 0)
  int64_t rotary_dim = -1;  // features rotated (even, <= D); -1: all D. The rest pass through
  bool interleaved = false; // pairs (2i, 2i + 1) (GPT-J, RoFormer); default pairs (i, i + rd / 2) (GPT-NeoX, LLaMA)
};

/// x [..., T, D] (sequence at dim -2, features at dim -1; e.g. [B, H, T, Dh]
/// or [B, T, Dh]), floating -> the same shape and dtype. Pair (a, b) of row t
/// becomes (a cos - b sin, b cos + a sin) with angle theta_i of that row.
/// The cos/sin table is computed once per call (in f64); the gradient is the
/// rotation by -theta.
///   Tensor q2 = rotary_embedding(q, {.offset = cache_len});
Tensor rotary_embedding(const Tensor& x, const RotaryOptions& opts = {});

}  // namespace kiln
