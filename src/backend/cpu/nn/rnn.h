// CPU kernels for the fused recurrent-cell tails (kiln/ops/rnn.h). Inputs are
// checked by src/ops/rnn.cpp and arrive contiguous with one floating dtype T;
// math runs in acc_t<T>. The plain ref:: versions (f64, one element at a time,
// std:: functions) are what the tests hold the fast ones to.
#pragma once

#include "kiln/core/tensor.h"

namespace kiln::backend::cpu {

namespace rnn_detail {
/// The cell kernels' typed pointers: an input's data, an output's (null when
/// the output is not wanted).
template <class T>
const T* cptr(const Tensor& t) {
  return static_cast<const T*>(t.data_ptr());
}
template <class T>
T* mptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}
}  // namespace rnn_detail

/// gates [B, 4H] (i, f, g, o pre-activations), c [B, H] -> h_out, c_out [B, H].
void lstm_cell(const Tensor& gates, const Tensor& c, const Tensor& h_out, const Tensor& c_out);
/// Backward of lstm_cell for upstream gh, gc [B, H] (gradients of h_out and
/// c_out); recomputes the activations from gates and c_new (= c_out):
///   dc = gc + gh * o * (1 - tanh(c_new)^2),  gc_prev = dc * f,
///   g_gates = [dc g i(1-i), dc c f(1-f), dc i (1-g^2), gh tanh(c_new) o(1-o)].
/// g_gates [B, 4H] and g_c [B, H] may be undefined (not needed).
void lstm_cell_backward(const Tensor& gates, const Tensor& c, const Tensor& c_new, const Tensor& gh,
                        const Tensor& gc, const Tensor& g_gates, const Tensor& g_c);

/// lstm_cell for training (lstm_sequence): the same h_out, c_out, and it
/// keeps what backward needs so that backward computes no transcendentals:
/// gates [B, 4H] is overwritten with the activations (sigmoid(i),
/// sigmoid(f), tanh(g), sigmoid(o)) and tc_out [B, H] = tanh(c_out).
void lstm_cell_train(const Tensor& gates, const Tensor& c, const Tensor& h_out, const Tensor& c_out,
                     const Tensor& tc_out);
/// Backward of lstm_cell_train from its saved activations acts [B, 4H], the
/// previous cell state c [B, H] and tc = tanh(c_new) [B, H]. dh [B, H] is the
/// gradient of h_out; dc [B, H] holds the gradient of c_out on entry and that
/// of c on exit (= (dc + dh o (1 - tc^2)) f); g_gates [B, 4H] gets the
/// gradient of the pre-activations (lstm_cell_backward's formulas).
void lstm_cell_backward_acts(const Tensor& acts, const Tensor& c, const Tensor& tc, const Tensor& dh,
                             const Tensor& dc, const Tensor& g_gates);

/// gi, gh [B, 3H] (r, z, n), h [B, H] -> h_out [B, H].
void gru_cell(const Tensor& gi, const Tensor& gh, const Tensor& h, const Tensor& h_out);
/// Backward of gru_cell for upstream g [B, H]; with dn = g (1 - z) (1 - n^2),
/// dr = dn gh_n r (1 - r), dz = g (h - n) z (1 - z):
///   g_gi = [dr, dz, dn], g_gh = [dr, dz, dn r], g_h = g z.
/// Any output may be undefined (not needed).
void gru_cell_backward(const Tensor& gi, const Tensor& gh, const Tensor& h, const Tensor& g, const Tensor& g_gi,
                       const Tensor& g_gh, const Tensor& g_h);

namespace ref {
void lstm_cell(const Tensor& gates, const Tensor& c, const Tensor& h_out, const Tensor& c_out);
void lstm_cell_backward(const Tensor& gates, const Tensor& c, const Tensor& c_new, const Tensor& gh,
                        const Tensor& gc, const Tensor& g_gates, const Tensor& g_c);
void gru_cell(const Tensor& gi, const Tensor& gh, const Tensor& h, const Tensor& h_out);
void gru_cell_backward(const Tensor& gi, const Tensor& gh, const Tensor& h, const Tensor& g, const Tensor& g_gi,
                       const Tensor& g_gh, const Tensor& g_h);
}  // namespace ref

}  // namespace kiln::backend::cpu
