// lstm_cell_pointwise and gru_cell_pointwise: argument checks, the fused CPU
// kernels (src/backend/cpu/nn/rnn.cpp) and their vjps. A vjp runs the fused backward
// kernel; when grad mode is on during backward (create_graph) it writes the
// same formulas with kiln ops, recomputing the activations from the saved
// pre-activations, so higher derivatives stay exact.
#include "kiln/ops/rnn.h"

#include "kiln/core/parallel.h"

#include "kiln/ops/binary.h"
#include "kiln/ops/index.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/record.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"
#include "src/backend/backend.h"
#include "src/backend/cpu/copy/copy.h"
#include "src/backend/cpu/linalg/matmul.h"
#include "src/backend/cpu/nn/rnn.h"
#include "src/ops/checks.h"

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

// The LSTM cell's backward written with differentiable kiln ops (the
// create_graph path of lstm_cell_pointwise and lstm_sequence): gates [B, 4H]
// pre-activations, c [B, H] the previous cell state, dh, dc_new [B, H] the
// upstream gradients of h_new and c_new. Returns (dgates [B, 4H], undefined
// unless want_gates; dc [B, H], the gradient of c).
std::pair<Tensor, Tensor> lstm_cell_vjp_composed(const Tensor& gates, const Tensor& c, const Tensor& dh,
                                                 const Tensor& dc_new, bool want_gates) {
  std::vector<Tensor> p = chunk(gates, 4, 1);
  Tensor i = sigmoid(p[0]), f = sigmoid(p[1]), g = tanh(p[2]), o = sigmoid(p[3]);
  Tensor tc = tanh(f * c + i * g);
  Tensor dc = dc_new + dh * o * (1.0 - tc * tc);
  Tensor dgates = want_gates ? cat({dc * g * i * (1.0 - i), dc * c * f * (1.0 - f), dc * i * (1.0 - g * g),
                                    dh * tc * o * (1.0 - o)},
                                   1)
                             : Tensor();
  return {dgates, dc * f};
}

}  // namespace

std::pair<Tensor, Tensor> lstm_cell_pointwise(const Tensor& gates, const Tensor& c) {
  const char* op = "lstm_cell_pointwise";
  check_cell(op, "gates", gates, 4, "c", c);
  Tensor gc = contiguous_nograd(gates), cc = contiguous_nograd(c);
  Tensor h_new = Tensor::empty(c.shape(), c.dtype(), c.device());
  Tensor c_new = Tensor::empty(c.shape(), c.dtype(), c.device());
  backend::cpu::lstm_cell(gc, cc, h_new, c_new);
  if (needs_grad(gates, c)) {
    // Saves the inputs (the gates are the recurrent GEMM's output, alive
    // anyway) and c_new; the activations are recomputed in backward.
    record(op, {gates, c}, {h_new, c_new}, {gates, c, c_new}, [](const VjpArgs& a) -> Grads {
      const Tensor &gates = a.saved[0], &c = a.saved[1], &c_new = a.saved[2];
      const Tensor &dh = a.grads[0], &dc_new = a.grads[1];
      if (GradMode::is_enabled()) {
        auto [dgates, dc] = lstm_cell_vjp_composed(gates, c, dh, dc_new, a.needs(0));
        return {dgates, a.needs(1) ? dc : Tensor()};
      }
      Tensor dgates = a.needs(0) ? Tensor::empty(gates.shape(), gates.dtype(), gates.device()) : Tensor();
      Tensor dc = a.needs(1) ? Tensor::empty(c.shape(), c.dtype(), c.device()) : Tensor();
      backend::cpu::lstm_cell_backward(contiguous(gates), contiguous(c), contiguous(c_new), contiguous(dh), contiguous(dc_new),
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
  Tensor out = Tensor::empty(h.shape(), h.dtype(), h.device());
  backend::cpu::gru_cell(ic, rc, hc, out);
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
      Tensor dgi = a.needs(0) ? Tensor::empty(gi.shape(), gi.dtype(), gi.device()) : Tensor();
      Tensor dgh = a.needs(1) ? Tensor::empty(gh.shape(), gh.dtype(), gh.device()) : Tensor();
      Tensor dh = a.needs(2) ? Tensor::empty(h.shape(), h.dtype(), h.device()) : Tensor();
      backend::cpu::gru_cell_backward(contiguous(gi), contiguous(gh), contiguous(h), contiguous(g), dgi, dgh, dh);
      return {dgi, dgh, dh};
    });
  }
  return out;
}

// ---------------------------------------------------------------- lstm_sequence

namespace {

// NOTE [lstm_sequence buffers]
// Forward keeps four time-major buffers: gates [T, B, 4H] (the
// pre-activations: x W_ih^T + b for all steps from one GEMM, then each step
// adds h_{t-1} W_hh^T into its slice, and the cell kernel overwrites the
// slice with the activations i, f, g, o), cs and tcs [T, B, H] (every step's
// c and tanh(c)) and the output hs [T, B, H], so backward evaluates no
// transcendental (backend::cpu::lstm_cell_backward_acts). Backward keeps dG [T, B, 4H] (dgates of every
// step) and dH [T, B, H] (g_hs, into whose slice t-1 step t adds
// dgates_t W_hh), and carries dc [B, H]; after the loop the weight grads are
// one GEMM each over all T*B rows: dW_ih = dG^T x, dW_hh = dG[1:]^T hs[:-1]
// + dG[0]^T h0, db = column sums of dG. No per-step allocation besides views.

void check_seq(const char* op, const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
               const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) {
  check_defined(op, x, "x");
  check_defined(op, h0, "h0");
  check_defined(op, c0, "c0");
  check_defined(op, w_ih, "w_ih");
  check_defined(op, w_hh, "w_hh");
  backend::device_of(op, x, h0, c0, w_ih, w_hh, b_ih, b_hh);
  KILN_CHECK(is_floating(x.dtype()), op, "expects floating tensors (f32, f64, bf16), got x {} {}", name(x.dtype()),
             to_string(x.shape()));
  KILN_CHECK(x.dim() == 3 && x.shape()[0] > 0, op, "x {} must be [T, B, I] (time major) with T > 0",
             to_string(x.shape()));
  const int64_t B = x.shape()[1], I = x.shape()[2];
  KILN_CHECK(w_hh.dim() == 2 && w_hh.shape()[0] % 4 == 0 && w_hh.shape()[0] == 4 * w_hh.shape()[1], op,
             "w_hh {} must be [4H, H]", to_string(w_hh.shape()));
  const int64_t H = w_hh.shape()[1];
  KILN_CHECK(w_ih.dim() == 2 && w_ih.shape()[0] == 4 * H && w_ih.shape()[1] == I, op,
             "w_ih {} must be [4H, I] = [{}, {}] for x {} and w_hh {}", to_string(w_ih.shape()), 4 * H, I,
             to_string(x.shape()), to_string(w_hh.shape()));
  for (auto [what, s] : {std::pair<const char*, const Tensor*>{"h0", &h0}, {"c0", &c0}})
    KILN_CHECK(s->dim() == 2 && s->shape()[0] == B && s->shape()[1] == H, op,
               "{} {} must be [B, H] = [{}, {}] for x {} and w_hh {}", what, to_string(s->shape()), B, H,
               to_string(x.shape()), to_string(w_hh.shape()));
  for (auto [what, b] : {std::pair<const char*, const Tensor*>{"b_ih", &b_ih}, {"b_hh", &b_hh}})
    KILN_CHECK(!b->defined() || (b->dim() == 1 && b->shape()[0] == 4 * H), op, "{} {} must be [4H] = [{}]", what,
               to_string(b->shape()), 4 * H);
  for (auto [what, t] : {std::pair<const char*, const Tensor*>{"h0", &h0}, {"c0", &c0}, {"w_ih", &w_ih},
                         {"w_hh", &w_hh}, {"b_ih", &b_ih}, {"b_hh", &b_hh}})
    KILN_CHECK(!t->defined() || t->dtype() == x.dtype(), op, "dtype mismatch: x is {} and {} is {}",
               name(x.dtype()), what, name(t->dtype()));
}

backend::cpu::MatmulEpilogue accumulate_into() {
  backend::cpu::MatmulEpilogue ep;
  ep.beta = 1;
  return ep;
}

// gates_t [B, 4H] += h [B, H] x W_hh^T, the forward's per-step product.
// oneDNN spreads a product this flat (B = 32 rows) poorly over threads: for
// [32, 256] x [256, 1024] it measured 102 us on one thread and 85 us on two
// (the backward's [32, 1024] x [1024, 256] goes 84 -> 49 us). Giving each
// thread its own block of columns (rows of W_hh, a contiguous block) takes
// it to 65 us on two. Below ~2^19 multiply-adds it stays one call (matmul
// runs those on one thread anyway).
void recurrent_product(const Tensor& h, const Tensor& w_hh, const Tensor& gates_t) {
  const int64_t B = h.shape()[0], H = h.shape()[1], N = w_hh.shape()[0];
  const int64_t parts = effective_num_threads();
  if (parts <= 1 || B * H * N < (int64_t(1) << 19) || N < 32 * parts) {
    backend::cpu::matmul(h, w_hh.t(), gates_t, accumulate_into());
    return;
  }
  parallel_for(0, parts, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      // Column blocks on 16-column (one AVX-512 vector of f32) boundaries.
      const int64_t c0 = N * p / parts / 16 * 16, c1 = p + 1 == parts ? N : N * (p + 1) / parts / 16 * 16;
      backend::cpu::matmul(h, w_hh.narrow(0, c0, c1 - c0).t(), gates_t.narrow(1, c0, c1 - c0), accumulate_into());
    }
  });
}

// create_graph: the same backpropagation through time written with
// differentiable ops, recomputing the forward from the saved inputs, so that
// higher derivatives are exact. saved = {x, h0, c0, w_ih, w_hh, b_ih, b_hh, ...}
// (the inputs as given, linked to the graph).
Grads lstm_sequence_vjp_composed(const VjpArgs& a) {
  const Tensor &x = a.saved[0], &h0 = a.saved[1], &c0 = a.saved[2], &w_ih = a.saved[3], &w_hh = a.saved[4];
  const Tensor &b_ih = a.saved[5], &b_hh = a.saved[6];
  const Tensor &g_hs = a.grads[0], &g_c = a.grads[1];
  const int64_t T = x.shape()[0];
  Tensor w_hh_t = w_hh.t();
  Tensor gi = matmul(x, w_ih.t());  // [T, B, 4H]
  if (b_ih.defined()) gi = gi + b_ih;
  if (b_hh.defined()) gi = gi + b_hh;
  const auto n = static_cast<size_t>(T);
  std::vector<Tensor> gates(n), h_prev(n), c_prev(n);
  Tensor h = h0, c = c0;
  for (int64_t t = 0; t < T; ++t) {
    const auto i = size_t(t);
    h_prev[i] = h;
    c_prev[i] = c;
    gates[i] = addmm(gi.select(0, t), h, w_hh_t);
    std::tie(h, c) = lstm_cell_pointwise(gates[i], c);
  }
  std::vector<Tensor> dgates(n);
  Tensor dh_next, dc = g_c, dw_hh;
  for (int64_t t = T - 1; t >= 0; --t) {
    const auto i = size_t(t);
    Tensor dh = dh_next.defined() ? g_hs.select(0, t) + dh_next : g_hs.select(0, t);
    std::tie(dgates[i], dc) = lstm_cell_vjp_composed(gates[i], c_prev[i], dh, dc, true);
    dh_next = mm(dgates[i], w_hh);
    Tensor dw = mm(dgates[i].t(), h_prev[i]);
    dw_hh = dw_hh.defined() ? dw_hh + dw : dw;
  }
  Tensor dg = stack(dgates, 0);  // [T, B, 4H]
  Tensor db = (a.needs(5) || a.needs(6)) ? sum(dg, {0, 1}) : Tensor();
  return {a.needs(0) ? matmul(dg, w_ih) : Tensor(),
          a.needs(1) ? dh_next : Tensor(),
          a.needs(2) ? dc : Tensor(),
          a.needs(3) ? mm(dg.flatten(0, 1).t(), x.flatten(0, 1)) : Tensor(),
          a.needs(4) ? dw_hh : Tensor(),
          a.needs(5) ? db : Tensor(),
          a.needs(6) ? db.clone() : Tensor()};
}

}  // namespace

std::pair<Tensor, Tensor> lstm_sequence(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                                        const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) {
  const char* op = "lstm_sequence";
  check_seq(op, x, h0, c0, w_ih, w_hh, b_ih, b_hh);
  const int64_t T = x.shape()[0], B = x.shape()[1], I = x.shape()[2], H = w_hh.shape()[1];
  const DType dt = x.dtype();
  Tensor xc, h0c, c0c, gates, cs, tcs, hs, bias;
  {
    NoGradGuard no_grad;
    xc = contiguous(x);
    h0c = contiguous(h0);
    c0c = contiguous(c0);
    gates = Tensor::empty({T, B, 4 * H}, dt, x.device());
    cs = Tensor::empty({T, B, H}, dt, x.device());
    tcs = Tensor::empty({T, B, H}, dt, x.device());
    hs = Tensor::empty({T, B, H}, dt, x.device());
    // Both biases enter the same pre-activation: fold them into the input
    // projection's epilogue ([4H], once per call).
    if (b_ih.defined() && b_hh.defined()) bias = add(b_ih, b_hh);
    else bias = b_ih.defined() ? b_ih : b_hh;
    backend::cpu::MatmulEpilogue ep;
    if (bias.defined()) ep.bias = &bias;
    backend::cpu::matmul(xc.view({T * B, I}), w_ih.t(), gates.view({T * B, 4 * H}), ep);  // [T*B, I] x [I, 4H]
    Tensor h = h0c, c = c0c;
    for (int64_t t = 0; t < T; ++t) {
      Tensor g = gates.select(0, t), hn = hs.select(0, t), cn = cs.select(0, t);
      recurrent_product(h, w_hh, g);  // [B, H] x [H, 4H] += into gates[t]
      backend::cpu::lstm_cell_train(g, c, hn, cn, tcs.select(0, t));  // g becomes the activations
      h = hn;
      c = cn;
    }
  }
  // The final c is its own tensor (not a view of cs, which backward keeps).
  Tensor c_last = Tensor::empty({B, H}, dt, x.device());
  backend::cpu::copy(cs.select(0, T - 1), c_last);
  if (needs_grad(x, h0, c0, w_ih, w_hh, b_ih, b_hh)) {
    record(op, {x, h0, c0, w_ih, w_hh, b_ih, b_hh}, {hs, c_last},
           {x, h0, c0, w_ih, w_hh, b_ih, b_hh, gates, cs, hs, xc, c0c, tcs}, [T, B, I, H](const VjpArgs& a) -> Grads {
             if (GradMode::is_enabled()) return lstm_sequence_vjp_composed(a);
             const Tensor &h0 = a.saved[1], &w_ih = a.saved[3], &w_hh = a.saved[4], &acts = a.saved[7],
                          &cs = a.saved[8], &hs = a.saved[9], &x = a.saved[10], &c0 = a.saved[11],
                          &tcs = a.saved[12];
             const DType dt = x.dtype();
             Tensor dH = Tensor::empty({T, B, H}, dt, x.device()), dc = Tensor::empty({B, H}, dt, x.device());
             Tensor dG = Tensor::empty({T, B, 4 * H}, dt, x.device());
             backend::cpu::copy(a.grads[0], dH);
             backend::cpu::copy(a.grads[1], dc);
             for (int64_t t = T - 1; t >= 0; --t) {
               Tensor dg = dG.select(0, t);
               backend::cpu::lstm_cell_backward_acts(acts.select(0, t), t > 0 ? cs.select(0, t - 1) : c0, tcs.select(0, t),
                                            dH.select(0, t), dc, dg);  // dc: grad of c_t in, of c_{t-1} out
               if (t > 0) backend::cpu::matmul(dg, w_hh, dH.select(0, t - 1), accumulate_into());  // [B, 4H] x [4H, H]
             }
             Grads out(7);
             if (a.needs(0)) {
               out[0] = Tensor::empty({T, B, I}, dt, x.device());
               backend::cpu::matmul(dG.view({T * B, 4 * H}), w_ih, out[0].view({T * B, I}));
             }
             if (a.needs(1)) {
               out[1] = Tensor::empty({B, H}, dt, x.device());
               backend::cpu::matmul(dG.select(0, 0), w_hh, out[1]);
             }
             if (a.needs(2)) out[2] = dc;
             if (a.needs(3)) {
               out[3] = Tensor::empty({4 * H, I}, dt, x.device());
               backend::cpu::matmul(dG.view({T * B, 4 * H}).t(), x.view({T * B, I}), out[3]);  // [4H, T*B] x [T*B, I]
             }
             if (a.needs(4)) {
               out[4] = Tensor::empty({4 * H, H}, dt, x.device());
               backend::cpu::matmul(dG.select(0, 0).t(), h0, out[4]);
               if (T > 1)  // [4H, (T-1)*B] x [(T-1)*B, H]
                 backend::cpu::matmul(dG.narrow(0, 1, T - 1).view({(T - 1) * B, 4 * H}).t(),
                             hs.narrow(0, 0, T - 1).view({(T - 1) * B, H}), out[4], accumulate_into());
             }
             if (a.needs(5) || a.needs(6)) {
               Tensor db = sum(dG.view({T * B, 4 * H}), {0});
               if (a.needs(5)) out[5] = db;
               if (a.needs(6)) out[6] = a.needs(5) ? db.clone() : db;
             }
             return out;
           });
  }
  return {hs, c_last};
}

}  // namespace kiln
