// Fused pointwise tails of the recurrent cells (SPECS L12): everything a
// GRU/LSTM step does after its GEMMs, in one pass over [B, H] with a fused
// backward. The recurrent layers (kiln/nn/recurrent.h) hoist the input
// projection into one GEMM over all timesteps, and each step then runs one
// recurrent GEMM and one of these. Letter legend: B = batch rows, H = hidden
// size; gate blocks are laid out along the last dim in PyTorch's order.
#pragma once

#include <utility>

#include "kiln/core/tensor.h"

namespace kiln {

/// LSTM cell tail. gates [B, 4H] are the pre-activations x W_ih^T + b_ih +
/// h W_hh^T + b_hh in PyTorch's order (i, f, g, o); c [B, H] the previous
/// cell state. Returns (h_new, c_new), both [B, H]:
///   c_new = sigmoid(f) * c + sigmoid(i) * tanh(g),  h_new = sigmoid(o) * tanh(c_new).
/// f32, f64, bf16; gates and c share the dtype.
///   auto [h, c2] = lstm_cell_pointwise(addmm(gi, h0, w_hh.t()), c);
std::pair<Tensor, Tensor> lstm_cell_pointwise(const Tensor& gates, const Tensor& c);

/// GRU cell tail. gi [B, 3H] = x W_ih^T + b_ih and gh [B, 3H] = h W_hh^T + b_hh
/// (kept apart because the n gate scales only the recurrent part), h [B, H]:
///   r = sigmoid(gi_r + gh_r), z = sigmoid(gi_z + gh_z),
///   n = tanh(gi_n + r * gh_n), h_new = (1 - z) * n + z * h.
/// Returns h_new [B, H]. f32, f64, bf16; all three share the dtype.
Tensor gru_cell_pointwise(const Tensor& gi, const Tensor& gh, const Tensor& h);

}  // namespace kiln
