// RNN, GRU, LSTM and their cells (SPECS L12, L13). See kiln/nn/recurrent.h
// and docs/nn_recurrent.md. Shapes: x [B, T, I]; inside a layer everything is
// time major ([T, B, *]) so that one timestep is a contiguous [B, *] block.
#include "kiln/nn/recurrent.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kiln/autograd/functional.h"
#include "kiln/core/error.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/index.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/rnn.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"

namespace kiln::nn {

namespace {

const char* nl_name(Nonlinearity nl) { return nl == Nonlinearity::relu ? "relu" : "tanh"; }

// b_ih + b_hh (either may be undefined). RNN and LSTM add both biases to the
// same pre-activation, so the layers fold them into the hoisted projection.
Tensor fold_bias(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return add(a, b);
}

Tensor state_or_zeros(const Tensor& s, int64_t B, int64_t H, DType dtype) {
  return s.defined() ? s : zeros({B, H}, {.dtype = dtype});
}

// Per-step pieces with every bias already in gi [B, G*H]; h, c [B, H];
// w_hh_t = W_hh^T [H, G*H].
Tensor rnn_step(const Tensor& gi, const Tensor& h, const Tensor& w_hh_t, Nonlinearity nl) {
  Tensor pre = addmm(gi, h, w_hh_t);
  return nl == Nonlinearity::relu ? relu(pre) : tanh(pre);
}
LSTMState lstm_step(const Tensor& gi, const LSTMState& s, const Tensor& w_hh_t) {
  auto [h, c] = lstm_cell_pointwise(addmm(gi, s.h, w_hh_t), s.c);
  return {h, c};
}
// GRU keeps b_hh with the recurrent part: gi [B, 3H] holds b_ih only.
Tensor gru_step(const Tensor& gi, const Tensor& h, const Tensor& w_hh, const Tensor& b_hh) {
  return gru_cell_pointwise(gi, linear(h, w_hh, b_hh), h);
}

void check_cell_input(const char* cell, const Tensor& x, int64_t I, DType dtype) {
  KILN_CHECK(x.defined(), cell, "input is an undefined tensor");
  KILN_CHECK(x.dim() == 2 && x.size(1) == I, cell, "input {} must be [B, {}] (input_size {})", to_string(x.shape()), I,
             I);
  KILN_CHECK(x.dtype() == dtype, cell, "input dtype {} does not match the parameters' {}", name(x.dtype()),
             name(dtype));
}
void check_cell_gates(const char* cell, const Tensor& g, int64_t GH, DType dtype) {
  KILN_CHECK(g.defined(), cell, "gates_i is an undefined tensor");
  KILN_CHECK(g.dim() == 2 && g.size(1) == GH, cell, "gates_i {} must be [B, {}] (the input projection)",
             to_string(g.shape()), GH);
  KILN_CHECK(g.dtype() == dtype, cell, "gates_i dtype {} does not match the parameters' {}", name(g.dtype()),
             name(dtype));
}
void check_cell_state(const char* cell, const char* what, const Tensor& s, int64_t B, int64_t H, DType dtype) {
  if (!s.defined()) return;
  KILN_CHECK(s.dim() == 2 && s.size(0) == B && s.size(1) == H, cell, "{} {} must be [B, H] = [{}, {}]", what,
             to_string(s.shape()), B, H);
  KILN_CHECK(s.dtype() == dtype, cell, "{} dtype {} does not match the parameters' {}", what, name(s.dtype()),
             name(dtype));
}

// Weights U(-1/sqrt(H), 1/sqrt(H)) with init.weight = fan_in_uniform: the
// fan given is H for both matrices (PyTorch's rule for recurrent layers).
void make_cell_params(Module& m, const Init& init, int64_t G, int64_t I, int64_t H, bool bias, Parameter& w_ih,
                      Parameter& w_hh, Parameter& b_ih, Parameter& b_hh, const std::string& suffix) {
  const Fan fan{H, G * H};
  w_ih = m.register_parameter("weight_ih" + suffix, init.make_weight({G * H, I}, fan));
  w_hh = m.register_parameter("weight_hh" + suffix, init.make_weight({G * H, H}, fan));
  if (bias) {
    b_ih = m.register_parameter("bias_ih" + suffix, init.make_bias({G * H}, fan));
    b_hh = m.register_parameter("bias_hh" + suffix, init.make_bias({G * H}, fan));
  }
}

void set_forget_bias(const char* kind, const Parameter& b_ih, int64_t H, std::optional<double> value) {
  KILN_CHECK(!value || std::isfinite(*value), kind, "forget_bias must be finite, got {}", *value);
  if (!b_ih.defined() || !value) return;
  NoGradGuard no_grad;
  fill_(narrow(b_ih.value(), 0, H, H), *value);
}

std::string cell_repr(int64_t I, int64_t H, bool bias) {
  std::string s = fmt::format("{}, {}", I, H);
  if (!bias) s += ", bias=false";
  return s;
}

}  // namespace

LSTMState stop_gradient(const LSTMState& s) {
  return {s.h.defined() ? s.h.detach() : Tensor(), s.c.defined() ? s.c.detach() : Tensor()};
}

// ---------------------------------------------------------------- cells

RNNCell::RNNCell(int64_t I, int64_t H, const Init& init, RNNCellOptions opts)
    : input_size(I), hidden_size(H), options(opts) {
  KILN_CHECK(I > 0 && H > 0, "RNNCell", "input_size {} and hidden_size {} must be positive", I, H);
  make_cell_params(*this, init, 1, I, H, opts.bias, weight_ih, weight_hh, bias_ih, bias_hh, "");
}

Tensor RNNCell::input_projection(const Tensor& x) const { return linear(x, weight_ih, bias_ih); }

Tensor RNNCell::step_with_gates(const Tensor& gi, const Tensor& h) const {
  check_cell_gates("RNNCell", gi, hidden_size, weight_ih.dtype());
  check_cell_state("RNNCell", "h", h, gi.size(0), hidden_size, weight_ih.dtype());
  Tensor pre = bias_hh.defined() ? add(gi, bias_hh.value()) : gi;
  return rnn_step(pre, state_or_zeros(h, gi.size(0), hidden_size, gi.dtype()), weight_hh.value().t(),
                  options.nonlinearity);
}

Tensor RNNCell::step(const Tensor& x, const Tensor& h) const {
  check_cell_input("RNNCell", x, input_size, weight_ih.dtype());
  check_cell_state("RNNCell", "h", h, x.size(0), hidden_size, x.dtype());
  return rnn_step(linear(x, weight_ih, fold_bias(bias_ih, bias_hh)),
                  state_or_zeros(h, x.size(0), hidden_size, x.dtype()), weight_hh.value().t(), options.nonlinearity);
}

std::string RNNCell::extra_repr() const {
  std::string s = cell_repr(input_size, hidden_size, options.bias);
  if (options.nonlinearity != Nonlinearity::tanh) s += fmt::format(", nonlinearity={}", nl_name(options.nonlinearity));
  return s;
}

GRUCell::GRUCell(int64_t I, int64_t H, const Init& init, GRUCellOptions opts)
    : input_size(I), hidden_size(H), options(opts) {
  KILN_CHECK(I > 0 && H > 0, "GRUCell", "input_size {} and hidden_size {} must be positive", I, H);
  make_cell_params(*this, init, 3, I, H, opts.bias, weight_ih, weight_hh, bias_ih, bias_hh, "");
}

Tensor GRUCell::input_projection(const Tensor& x) const { return linear(x, weight_ih, bias_ih); }

Tensor GRUCell::step_with_gates(const Tensor& gi, const Tensor& h) const {
  check_cell_gates("GRUCell", gi, 3 * hidden_size, weight_ih.dtype());
  check_cell_state("GRUCell", "h", h, gi.size(0), hidden_size, weight_ih.dtype());
  return gru_step(gi, state_or_zeros(h, gi.size(0), hidden_size, gi.dtype()), weight_hh, bias_hh);
}

Tensor GRUCell::step(const Tensor& x, const Tensor& h) const {
  check_cell_input("GRUCell", x, input_size, weight_ih.dtype());
  check_cell_state("GRUCell", "h", h, x.size(0), hidden_size, x.dtype());
  return gru_step(input_projection(x), state_or_zeros(h, x.size(0), hidden_size, x.dtype()), weight_hh, bias_hh);
}

std::string GRUCell::extra_repr() const { return cell_repr(input_size, hidden_size, options.bias); }

LSTMCell::LSTMCell(int64_t I, int64_t H, const Init& init, LSTMCellOptions opts)
    : input_size(I), hidden_size(H), options(opts) {
  KILN_CHECK(I > 0 && H > 0, "LSTMCell", "input_size {} and hidden_size {} must be positive", I, H);
  make_cell_params(*this, init, 4, I, H, opts.bias, weight_ih, weight_hh, bias_ih, bias_hh, "");
  set_forget_bias("LSTMCell", bias_ih, H, opts.forget_bias);
}

Tensor LSTMCell::input_projection(const Tensor& x) const { return linear(x, weight_ih, bias_ih); }

LSTMState LSTMCell::step_with_gates(const Tensor& gi, const LSTMState& s) const {
  check_cell_gates("LSTMCell", gi, 4 * hidden_size, weight_ih.dtype());
  const int64_t B = gi.size(0);
  check_cell_state("LSTMCell", "h", s.h, B, hidden_size, gi.dtype());
  check_cell_state("LSTMCell", "c", s.c, B, hidden_size, gi.dtype());
  Tensor pre = bias_hh.defined() ? add(gi, bias_hh.value()) : gi;
  return lstm_step(pre,
                   {state_or_zeros(s.h, B, hidden_size, gi.dtype()), state_or_zeros(s.c, B, hidden_size, gi.dtype())},
                   weight_hh.value().t());
}

LSTMState LSTMCell::step(const Tensor& x, const LSTMState& s) const {
  check_cell_input("LSTMCell", x, input_size, weight_ih.dtype());
  const int64_t B = x.size(0);
  check_cell_state("LSTMCell", "h", s.h, B, hidden_size, x.dtype());
  check_cell_state("LSTMCell", "c", s.c, B, hidden_size, x.dtype());
  return lstm_step(linear(x, weight_ih, fold_bias(bias_ih, bias_hh)),
                   {state_or_zeros(s.h, B, hidden_size, x.dtype()), state_or_zeros(s.c, B, hidden_size, x.dtype())},
                   weight_hh.value().t());
}

std::string LSTMCell::extra_repr() const { return cell_repr(input_size, hidden_size, options.bias); }

// ---------------------------------------------------------------- layers

RecurrentBase::RecurrentBase(const char* kind, int64_t G, int64_t I, int64_t H, int64_t L, bool with_bias,
                             const Init& init)
    : input_size(I), hidden_size(H), num_layers(L), bias(with_bias), kind_(kind) {
  KILN_CHECK(I > 0 && H > 0, kind, "input_size {} and hidden_size {} must be positive", I, H);
  KILN_CHECK(L >= 1, kind, "num_layers must be at least 1, got {}", L);
  weight_ih.resize(size_t(L));
  weight_hh.resize(size_t(L));
  bias_ih.resize(size_t(L));
  bias_hh.resize(size_t(L));
  for (int64_t k = 0; k < L; ++k) {
    const auto i = size_t(k);
    make_cell_params(*this, init, G, k == 0 ? I : H, H, with_bias, weight_ih[i], weight_hh[i], bias_ih[i],
                     bias_hh[i], fmt::format("_l{}", k));
  }
}

std::string RecurrentBase::base_repr() const {
  std::string s = fmt::format("{}, {}", input_size, hidden_size);
  if (num_layers != 1) s += fmt::format(", num_layers={}", num_layers);
  if (!bias) s += ", bias=false";
  return s;
}

void RecurrentBase::check_state(const Tensor& x, const Tensor& s, const char* what) const {
  if (!s.defined()) return;
  const int64_t B = x.size(0);
  KILN_CHECK(s.dim() == 3 && s.size(0) == num_layers && s.size(1) == B && s.size(2) == hidden_size, kind_,
             "{} {} must be [num_layers, B, H] = [{}, {}, {}] for input {}", what, to_string(s.shape()), num_layers, B,
             hidden_size, to_string(x.shape()));
  KILN_CHECK(s.dtype() == x.dtype(), kind_, "{} dtype {} does not match the input's {}", what, name(s.dtype()),
             name(x.dtype()));
}

Tensor RecurrentBase::check_inputs(const Tensor& x, const Tensor& lengths) const {
  KILN_CHECK(x.defined(), kind_, "input is an undefined tensor");
  KILN_CHECK(x.dim() == 3, kind_, "input {} must be [B, T, I] (batch first)", to_string(x.shape()));
  KILN_CHECK(x.size(2) == input_size, kind_, "input {} has {} features, expected {} (input_size)",
             to_string(x.shape()), x.size(2), input_size);
  KILN_CHECK(x.dtype() == weight_ih[0].dtype(), kind_, "input dtype {} does not match the parameters' {}",
             name(x.dtype()), name(weight_ih[0].dtype()));
  KILN_CHECK(x.size(1) > 0, kind_, "input {} has no timesteps (T = 0)", to_string(x.shape()));
  if (!lengths.defined()) return {};
  // Validated on the host before any compute (spec 000: lengths in [0, T]).
  const int64_t B = x.size(0), T = x.size(1);
  KILN_CHECK(lengths.dtype() == kI64 || lengths.dtype() == kI32 || lengths.dtype() == kU8, kind_,
             "lengths must be an integer tensor (i64, i32, u8), got {} {}", name(lengths.dtype()),
             to_string(lengths.shape()));
  KILN_CHECK(lengths.dim() == 1 && lengths.size(0) == B, kind_, "lengths {} must be [B] = [{}] for input {}",
             to_string(lengths.shape()), B, to_string(x.shape()));
  const std::vector<int64_t> len = lengths.to_vector<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    KILN_CHECK(len[size_t(b)] >= 0 && len[size_t(b)] <= T, kind_, "lengths[{}] = {} is outside [0, T] = [0, {}]", b,
               len[size_t(b)], T);
  // valid[t, b, 0] = t < lengths[b]
  Tensor valid = Tensor::empty({T, B, 1}, kBool);
  bool* v = valid.data<bool>();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t b = 0; b < B; ++b) v[t * B + b] = t < len[size_t(b)];
  return valid;
}

namespace {

// NOTE [Recurrent driver]
// Runs a stack of L layers over x [B, T, I] (time major inside). Per layer k:
// gi = project(k, in [T, B, F]) -> [T, B, G*H] in one GEMM, then for each t
// carry = step(k, gi[t], carry), carry.h being the step's output. With a
// valid-step mask [T, B, 1], a row past its length keeps its carry and
// outputs zeros (masks over the whole batch: torch.where, no per-row loops);
// a step where every row is valid skips the masking, one where none is skips
// the step. `carry` holds the initial state per layer on entry (h, and c for
// LSTM) and the final one on exit. Returns the top layer's outputs [B, T, H].
template <class Project, class Step>
Tensor run_stack(const Tensor& x, int64_t L, int64_t H, const Tensor& valid, std::vector<LSTMState>& carry,
                 Project&& project, Step&& step) {
  const int64_t B = x.size(0), T = x.size(1);
  std::vector<char> all(size_t(T), 1), none(size_t(T), 0);
  std::vector<Tensor> masks(static_cast<size_t>(T));
  if (valid.defined()) {
    const bool* v = valid.data<bool>();
    for (int64_t t = 0; t < T; ++t) {
      int64_t n = 0;
      for (int64_t b = 0; b < B; ++b) n += v[t * B + b];
      all[size_t(t)] = n == B;
      none[size_t(t)] = n == 0;
      if (n != B && n != 0) masks[size_t(t)] = valid.select(0, t);  // [B, 1]
    }
  }
  Tensor zero_out;  // [B, H] zeros for steps where no row is valid
  Tensor in = contiguous(transpose(x, 0, 1));  // [T, B, I]
  for (int64_t k = 0; k < L; ++k) {
    std::vector<Tensor> gi = unbind(project(k, in), 0);  // T x [B, G*H]
    LSTMState s = carry[size_t(k)];
    std::vector<Tensor> outs(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) {
      const auto i = size_t(t);
      if (none[i]) {
        if (!zero_out.defined()) zero_out = zeros({B, H}, {.dtype = x.dtype()});
        outs[i] = zero_out;
        continue;
      }
      LSTMState n = step(k, gi[i], s);
      if (all[i]) {
        s = n;
        outs[i] = n.h;
      } else {
        const Tensor& m = masks[i];
        outs[i] = where(m, n.h, 0.0);
        s.h = where(m, n.h, s.h);
        if (s.c.defined()) s.c = where(m, n.c, s.c);
      }
    }
    carry[size_t(k)] = s;
    in = stack(outs, 0);  // [T, B, H]: the next layer's input (masked outputs)
  }
  return contiguous(transpose(in, 0, 1));
}

// True when there is no valid-step mask [T, B, 1] or every entry is set.
bool all_valid(const Tensor& valid) {
  if (!valid.defined()) return true;
  const bool* v = valid.data<bool>();
  return std::all_of(v, v + valid.numel(), [](bool b) { return b; });
}

// Per-layer initial carry from [L, B, H] (or zeros).
Tensor layer_state(const Tensor& s, int64_t k, int64_t B, int64_t H, DType dtype) {
  return s.defined() ? s.select(0, k) : zeros({B, H}, {.dtype = dtype});
}

Tensor stack_h(const std::vector<LSTMState>& carry, bool c) {
  std::vector<Tensor> hs;
  for (const auto& s : carry) hs.push_back(c ? s.c : s.h);
  return stack(hs, 0);
}

}  // namespace

RNN::RNN(int64_t I, int64_t H, const Init& init, RNNOptions o)
    : RecurrentBase("RNN", 1, I, H, o.num_layers, o.bias, init), nonlinearity(o.nonlinearity) {}

RecurrentOutput RNN::forward(const Tensor& x, const Tensor& h0, const Tensor& lengths) const {
  Tensor valid = check_inputs(x, lengths);
  check_state(x, h0, "h0");
  const int64_t B = x.size(0), H = hidden_size;
  std::vector<LSTMState> carry(static_cast<size_t>(num_layers));
  for (int64_t k = 0; k < num_layers; ++k) carry[size_t(k)].h = layer_state(h0, k, B, H, x.dtype());
  std::vector<Tensor> w_hh_t(static_cast<size_t>(num_layers));
  for (int64_t k = 0; k < num_layers; ++k) w_hh_t[size_t(k)] = weight_hh[size_t(k)].value().t();
  Tensor out = run_stack(
      x, num_layers, H, valid, carry,
      [&](int64_t k, const Tensor& in) {
        return linear(in, weight_ih[size_t(k)], fold_bias(bias_ih[size_t(k)], bias_hh[size_t(k)]));
      },
      [&](int64_t k, const Tensor& gi, const LSTMState& s) -> LSTMState {
        return {rnn_step(gi, s.h, w_hh_t[size_t(k)], nonlinearity), Tensor()};
      });
  return {out, stack_h(carry, false)};
}

std::string RNN::extra_repr() const {
  std::string s = base_repr();
  if (nonlinearity != Nonlinearity::tanh) s += fmt::format(", nonlinearity={}", nl_name(nonlinearity));
  return s;
}

GRU::GRU(int64_t I, int64_t H, const Init& init, GRUOptions o)
    : RecurrentBase("GRU", 3, I, H, o.num_layers, o.bias, init) {}

RecurrentOutput GRU::forward(const Tensor& x, const Tensor& h0, const Tensor& lengths) const {
  Tensor valid = check_inputs(x, lengths);
  check_state(x, h0, "h0");
  const int64_t B = x.size(0), H = hidden_size;
  std::vector<LSTMState> carry(static_cast<size_t>(num_layers));
  for (int64_t k = 0; k < num_layers; ++k) carry[size_t(k)].h = layer_state(h0, k, B, H, x.dtype());
  Tensor out = run_stack(
      x, num_layers, H, valid, carry,
      [&](int64_t k, const Tensor& in) { return linear(in, weight_ih[size_t(k)], bias_ih[size_t(k)]); },
      [&](int64_t k, const Tensor& gi, const LSTMState& s) -> LSTMState {
        return {gru_step(gi, s.h, weight_hh[size_t(k)], bias_hh[size_t(k)]), Tensor()};
      });
  return {out, stack_h(carry, false)};
}

std::string GRU::extra_repr() const { return base_repr(); }

LSTM::LSTM(int64_t I, int64_t H, const Init& init, LSTMOptions o)
    : RecurrentBase("LSTM", 4, I, H, o.num_layers, o.bias, init), forget_bias(o.forget_bias) {
  for (int64_t k = 0; k < num_layers; ++k) set_forget_bias("LSTM", bias_ih[size_t(k)], H, o.forget_bias);
}

LSTMOutput LSTM::forward(const Tensor& x, const LSTMState& state, const Tensor& lengths) const {
  Tensor valid = check_inputs(x, lengths);
  check_state(x, state.h, "h0");
  check_state(x, state.c, "c0");
  const int64_t B = x.size(0), H = hidden_size;
  std::vector<LSTMState> carry(static_cast<size_t>(num_layers));
  std::vector<Tensor> w_hh_t(static_cast<size_t>(num_layers));
  for (int64_t k = 0; k < num_layers; ++k) {
    carry[size_t(k)] = {layer_state(state.h, k, B, H, x.dtype()), layer_state(state.c, k, B, H, x.dtype())};
    w_hh_t[size_t(k)] = weight_hh[size_t(k)].value().t();
  }
  if (all_valid(valid)) {
    // Every row runs all T steps: one lstm_sequence op per layer (input
    // projection, recurrence and backward each fused over the sequence).
    const int64_t T = x.size(1);
    Tensor in = contiguous(transpose(x, 0, 1));  // [T, B, I]
    for (int64_t k = 0; k < num_layers; ++k) {
      const auto i = size_t(k);
      auto [hs, c_last] = lstm_sequence(in, carry[i].h, carry[i].c, weight_ih[i], weight_hh[i], bias_ih[i], bias_hh[i]);
      carry[i] = {hs.select(0, T - 1), c_last};
      in = hs;  // [T, B, H]
    }
    return {contiguous(transpose(in, 0, 1)), {stack_h(carry, false), stack_h(carry, true)}};
  }
  Tensor out = run_stack(
      x, num_layers, H, valid, carry,
      [&](int64_t k, const Tensor& in) {
        return linear(in, weight_ih[size_t(k)], fold_bias(bias_ih[size_t(k)], bias_hh[size_t(k)]));
      },
      [&](int64_t k, const Tensor& gi, const LSTMState& s) { return lstm_step(gi, s, w_hh_t[size_t(k)]); });
  return {out, {stack_h(carry, false), stack_h(carry, true)}};
}

std::string LSTM::extra_repr() const { return base_repr(); }

}  // namespace kiln::nn
