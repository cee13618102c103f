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

/// One LSTM layer over a whole sequence as one op (what nn::LSTM runs when no
/// row is cut short by lengths). Time major: x [T, B, I]; h0, c0 [B, H];
/// w_ih [4H, I]; w_hh [4H, H]; b_ih, b_hh [4H] (either or both undefined: no
/// bias). Returns (hs [T, B, H], the h of every step; c_T [B, H], the final
/// cell state); the final h is hs[T - 1]. The same values as T steps of
///   (h, c) = lstm_cell_pointwise(x[t] W_ih^T + b_ih + b_hh + h W_hh^T, c).
/// The input projection of all T steps is one GEMM into a [T, B, 4H] buffer,
/// each step adds its recurrent GEMM into its slice and runs the fused tail;
/// one autograd node for the sequence, whose backward runs the recurrence in
/// reverse and then forms dW_ih, dW_hh and the bias grads as single GEMMs
/// (sums) over all T*B rows. f32, f64, bf16; all tensors share the dtype.
///   auto [hs, c_T] = lstm_sequence(x_tbi, h0, c0, w_ih, w_hh, b_ih, b_hh);
std::pair<Tensor, Tensor> lstm_sequence(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                                        const Tensor& w_hh, const Tensor& b_ih = {}, const Tensor& b_hh = {});

/// GRU cell tail. gi [B, 3H] = x W_ih^T + b_ih and gh [B, 3H] = h W_hh^T + b_hh
/// (kept apart because the n gate scales only the recurrent part), h [B, H]:
///   r = sigmoid(gi_r + gh_r), z = sigmoid(gi_z + gh_z),
///   n = tanh(gi_n + r * gh_n), h_new = (1 - z) * n + z * h.
/// Returns h_new [B, H]. f32, f64, bf16; all three share the dtype.
Tensor gru_cell_pointwise(const Tensor& gi, const Tensor& gh, const Tensor& h);

}  // namespace kiln
