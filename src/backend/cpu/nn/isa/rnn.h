// CPU LSTM and GRU cells: the kernels' two copies (NOTE [Per-ISA kernels] in CMakeLists.txt);
// contracts as in ../rnn.h, whose functions pick one with KILN_ISA_CALL.
#pragma once

#include "src/backend/cpu/isa.h"
#include "src/backend/cpu/nn/rnn.h"

namespace kiln::backend::cpu {

KILN_ISA_DECLARE(
    void lstm_cell(const Tensor& gates, const Tensor& c, const Tensor& h_out, const Tensor& c_out);
    void lstm_cell_backward(const Tensor& gates, const Tensor& c, const Tensor& c_new, const Tensor& gh,
                            const Tensor& gc, const Tensor& g_gates, const Tensor& g_c);
    void lstm_cell_train(const Tensor& gates, const Tensor& c, const Tensor& h_out, const Tensor& c_out,
                         const Tensor& tc_out);
    void lstm_cell_backward_acts(const Tensor& acts, const Tensor& c, const Tensor& tc, const Tensor& dh,
                                 const Tensor& dc, const Tensor& g_gates);
    void gru_cell(const Tensor& gi, const Tensor& gh, const Tensor& h, const Tensor& h_out);
    void gru_cell_backward(const Tensor& gi, const Tensor& gh, const Tensor& h, const Tensor& g, const Tensor& g_gi,
                           const Tensor& g_gh, const Tensor& g_h);)

}  // namespace kiln::backend::cpu
