// lstm_cell_pointwise and gru_cell_pointwise: argument checks, the fused CPU
// kernels (src/ops/cpu/rnn.cpp) and their vjps. A vjp runs the fused backward
// kernel; when grad mode is on during backward (create_graph) it writes the
// same formulas with kiln ops, recomputing the activations from the saved
// pre-activations, so higher derivatives stay exact.
#include "kiln/ops/rnn.h"

#include "kiln/ops/binary.h"
#include "kiln/ops/index.h"
#include "kiln/ops/record.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"
#include "src/ops/checks.h"
#include "src/ops/cpu/rnn.h"

namespace kiln {

namespace {

Tensor contiguous_nograd(const Tensor& t) {
  NoGradGuard no_grad;
  return contiguous(t);
}

// State [B, H] and a gate block [B, G*H] of the state's floating dtype.
void check_cell(const char* op, const char* gates_name, const Tensor& gates, int64_t G, const char* state_name,
                const Tensor& state) {
  check_defined(op, gates, gates_name);
  check_defined(op, state, state_name);
  KILN_CHECK(state.dim() == 2, op, "{} must be [B, H], got {}", state_name, to_string(state.shape()));
  KILN_CHECK(is_floating(state.dtype()), op, "expects floating tensors (f32, f64, bf16), got {} {} {}", state_name,
             name(state.dtype()), to_string(state.shape()));
  const int64_t B = state.shape()[0], H = state.shape()[1];
  KILN_CHECK(gates.dim() == 2 && gates.shape()[0] == B && gates.shape()[1] == G * H, op,
             "{} {} must be [B, {}H] = [{}, {}] for {} {}", gates_name, to_string(gates.shape()), G, B, G * H,
             state_name, to_string(state.shape()));
  KILN_CHECK(gates.dtype() == state.dtype(), op, "dtype mismatch: {} is {} and {} is {}", gates_name,
             name(gates.dtype()), state_name, name(state.dtype()));
}

}  // namespace

std::pair<Tensor, Tensor> lstm_cell_pointwise(const Tensor& gates, const Tensor& c) {
  const char* op = "lstm_cell_pointwise";
  check_cell(op, "gates", gates, 4, "c", c);
  Tensor gc = contiguous_nograd(gates), cc = contiguous_nograd(c);
  Tensor h_new = Tensor::empty(c.shape(), c.dtype());
  Tensor c_new = Tensor::empty(c.shape(), c.dtype());
  cpu::lstm_cell(gc, cc, h_new, c_new);
  if (needs_grad(gates, c)) {
    // Saves the inputs (the gates are the recurrent GEMM's output, alive
    // anyway) and c_new; the activations are recomputed in backward.
    record(op, {gates, c}, {h_new, c_new}, {gates, c, c_new}, [](const VjpArgs& a) -> Grads {
      const Tensor &gates = a.saved[0], &c = a.saved[1], &c_new = a.saved[2];
      const Tensor &dh = a.grads[0], &dc_new = a.grads[1];
      if (GradMode::is_enabled()) {
        std::vector<Tensor> p = chunk(gates, 4, 1);
        Tensor i = sigmoid(p[0]), f = sigmoid(p[1]), g = tanh(p[2]), o = sigmoid(p[3]);
        Tensor tc = tanh(f * c + i * g);
        Tensor dc = dc_new + dh * o * (1.0 - tc * tc);
        Tensor dgates = a.needs(0) ? cat({dc * g * i * (1.0 - i), dc * c * f * (1.0 - f), dc * i * (1.0 - g * g),
                                          dh * tc * o * (1.0 - o)},
                                         1)
                                   : Tensor();
        return {dgates, a.needs(1) ? dc * f : Tensor()};
      }
      Tensor dgates = a.needs(0) ? Tensor::empty(gates.shape(), gates.dtype()) : Tensor();
      Tensor dc = a.needs(1) ? Tensor::empty(c.shape(), c.dtype()) : Tensor();
      cpu::lstm_cell_backward(contiguous(gates), contiguous(c), contiguous(c_new), contiguous(dh), contiguous(dc_new),
                              dgates, dc);
      return {dgates, dc};
    });
  }
  return {h_new, c_new};
}

Tensor gru_cell_pointwise(const Tensor& gi, const Tensor& gh, const Tensor& h) {
  const char* op = "gru_cell_pointwise";
  check_cell(op, "gi", gi, 3, "h", h);
  check_cell(op, "gh", gh, 3, "h", h);
  Tensor ic = contiguous_nograd(gi), rc = contiguous_nograd(gh), hc = contiguous_nograd(h);
  Tensor out = Tensor::empty(h.shape(), h.dtype());
  cpu::gru_cell(ic, rc, hc, out);
  if (needs_grad(gi, gh, h)) {
    record(op, {gi, gh, h}, {out}, {gi, gh, h}, [](const VjpArgs& a) -> Grads {
      const Tensor &gi = a.saved[0], &gh = a.saved[1], &h = a.saved[2];
      const Tensor& g = a.grad();
      if (GradMode::is_enabled()) {
        std::vector<Tensor> x = chunk(gi, 3, 1), y = chunk(gh, 3, 1);
        Tensor r = sigmoid(x[0] + y[0]), z = sigmoid(x[1] + y[1]);
        Tensor n = tanh(x[2] + r * y[2]);
        Tensor dn = g * (1.0 - z) * (1.0 - n * n);
        Tensor dr = dn * y[2] * r * (1.0 - r);
        Tensor dz = g * (h - n) * z * (1.0 - z);
        return {a.needs(0) ? cat({dr, dz, dn}, 1) : Tensor(), a.needs(1) ? cat({dr, dz, dn * r}, 1) : Tensor(),
                a.needs(2) ? g * z : Tensor()};
      }
      Tensor dgi = a.needs(0) ? Tensor::empty(gi.shape(), gi.dtype()) : Tensor();
      Tensor dgh = a.needs(1) ? Tensor::empty(gh.shape(), gh.dtype()) : Tensor();
      Tensor dh = a.needs(2) ? Tensor::empty(h.shape(), h.dtype()) : Tensor();
      cpu::gru_cell_backward(contiguous(gi), contiguous(gh), contiguous(h), contiguous(g), dgi, dgh, dh);
      return {dgi, dgh, dh};
    });
  }
  return out;
}

}  // namespace kiln
