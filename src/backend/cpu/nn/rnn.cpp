// CPU LSTM and GRU cells: the entry points, which run the kernel copy for
// the CPU's vector ISA (isa/rnn.cpp).
#include "src/backend/cpu/nn/isa/rnn.h"
#include "src/backend/cpu/nn/rnn.h"

namespace kiln::backend::cpu {

void lstm_cell(const Tensor& gates, const Tensor& c, const Tensor& h_out, const Tensor& c_out) {
  KILN_ISA_CALL(lstm_cell, gates, c, h_out, c_out);
}

void lstm_cell_backward(const Tensor& gates, const Tensor& c, const Tensor& c_new, const Tensor& gh,
                        const Tensor& gc, const Tensor& g_gates, const Tensor& g_c) {
  KILN_ISA_CALL(lstm_cell_backward, gates, c, c_new, gh, gc, g_gates, g_c);
}

void lstm_cell_train(const Tensor& gates, const Tensor& c, const Tensor& h_out, const Tensor& c_out,
                     const Tensor& tc_out) {
  KILN_ISA_CALL(lstm_cell_train, gates, c, h_out, c_out, tc_out);
}

void lstm_cell_backward_acts(const Tensor& acts, const Tensor& c, const Tensor& tc, const Tensor& dh,
                             const Tensor& dc, const Tensor& g_gates) {
  KILN_ISA_CALL(lstm_cell_backward_acts, acts, c, tc, dh, dc, g_gates);
}

void gru_cell(const Tensor& gi, const Tensor& gh, const Tensor& h, const Tensor& h_out) {
  KILN_ISA_CALL(gru_cell, gi, gh, h, h_out);
}

void gru_cell_backward(const Tensor& gi, const Tensor& gh, const Tensor& h, const Tensor& g, const Tensor& g_gi,
                       const Tensor& g_gh, const Tensor& g_h) {
  KILN_ISA_CALL(gru_cell_backward, gi, gh, h, g, g_gi, g_gh, g_h);
}

}  // namespace kiln::backend::cpu
