// Recurrent layers (SPECS L12, L13; spec 000 "Recurrent state"): RNN, GRU,
// LSTM and their cells, batch first. Letter legend: B = batch, T = time,
// I = input size, H = hidden size, L = num_layers, G = gates per cell
// (RNN 1, GRU 3, LSTM 4).
//
//   nn::LSTM lstm(64, 128, rngs, {.num_layers = 2});
//   auto [seq, state] = lstm.forward(x);            // x [B, T, 64] -> seq [B, T, 128]
//   auto [h, c] = state;                            // each [2, B, 128]
//   auto [seq2, state2] = lstm.forward(x2, stop_gradient(state));  // streaming, truncated BPTT
//
// Parameters carry PyTorch's names and layouts (weight_ih_l{k} [G*H, I or H],
// weight_hh_l{k} [G*H, H], bias_ih_l{k}, bias_hh_l{k}; gate order LSTM i,f,g,o
// and GRU r,z,n), so torch.nn.{RNN,GRU,LSTM}(batch_first=True) state dicts
// load by name. Each layer computes its input projection for all timesteps as
// one GEMM ([T*B, I] x [I, G*H]); the time loop runs one recurrent GEMM and
// one fused pointwise op (kiln/ops/rnn.h) per step.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/nn/init.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

enum class Nonlinearity { tanh, relu };

/// LSTM carry: h and c, [B, H] for a cell, [L, B, H] for a layer. Undefined
/// tensors mean zeros. Structured bindings work: auto [h, c] = state.
struct LSTMState {
  Tensor h;
  Tensor c;
};
/// stop_gradient of both tensors (truncated backpropagation through time).
LSTMState stop_gradient(const LSTMState& state);

/// What RNN and GRU return: the top layer's outputs [B, T, H] and the final
/// carry h [L, B, H]. auto [seq, h] = gru.forward(x);
struct RecurrentOutput {
  Tensor output;
  Tensor h;
};
/// What LSTM returns: outputs [B, T, H] and the final (h, c), each [L, B, H].
struct LSTMOutput {
  Tensor output;
  LSTMState state;
};

struct RNNCellOptions {
  bool bias = true;
  Nonlinearity nonlinearity = Nonlinearity::tanh;
};
struct GRUCellOptions {
  bool bias = true;
};
struct LSTMCellOptions {
  bool bias = true;
  /// Value written into bias_ih's forget slice [H, 2H) at construction
  /// (spec 000: "LSTM forget bias is one"); bias_hh stays as init.bias drew
  /// it. nullopt keeps init.bias's draw there too (PyTorch's behaviour with
  /// init.bias = nn::init::fan_in_uniform()).
  std::optional<double> forget_bias = 1.0;
};
struct RNNOptions {
  int64_t num_layers = 1;
  bool bias = true;
  Nonlinearity nonlinearity = Nonlinearity::tanh;
};
struct GRUOptions {
  int64_t num_layers = 1;
  bool bias = true;
};
struct LSTMOptions {
  int64_t num_layers = 1;
  bool bias = true;
  std::optional<double> forget_bias = 1.0;  // as LSTMCellOptions::forget_bias, for every layer
};

// ---- cells: one timestep, x [B, I] and state [B, H] ----

/// Elman cell: h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh) (or relu).
class RNNCell : public Module {
 public:
  RNNCell(int64_t input_size, int64_t hidden_size, const Init& init, RNNCellOptions options = {});

  /// x [B, I], h [B, H] (undefined: zeros) -> h' [B, H].
  Tensor step(const Tensor& x, const Tensor& h = {}) const;
  Tensor forward(const Tensor& x, const Tensor& h = {}) const { return step(x, h); }
  /// x [..., I] -> x W_ih^T + b_ih [..., H]: the input projection, for any
  /// number of rows (e.g. all timesteps at once).
  Tensor input_projection(const Tensor& x) const;
  /// One step from a precomputed input_projection row block gates_i [B, H].
  Tensor step_with_gates(const Tensor& gates_i, const Tensor& h = {}) const;
  std::string extra_repr() const override;

  int64_t input_size, hidden_size;
  RNNCellOptions options;
  Parameter weight_ih, weight_hh, bias_ih, bias_hh;  // [H, I], [H, H], [H], [H]
};

/// GRU cell (PyTorch's equations: n = tanh(W_in x + b_in + r * (W_hn h + b_hn))).
class GRUCell : public Module {
 public:
  GRUCell(int64_t input_size, int64_t hidden_size, const Init& init, GRUCellOptions options = {});

  Tensor step(const Tensor& x, const Tensor& h = {}) const;
  Tensor forward(const Tensor& x, const Tensor& h = {}) const { return step(x, h); }
  Tensor input_projection(const Tensor& x) const;  // [..., I] -> [..., 3H]
  Tensor step_with_gates(const Tensor& gates_i, const Tensor& h = {}) const;  // gates_i [B, 3H]
  std::string extra_repr() const override;

  int64_t input_size, hidden_size;
  GRUCellOptions options;
  Parameter weight_ih, weight_hh, bias_ih, bias_hh;  // [3H, I], [3H, H], [3H], [3H]
};

/// LSTM cell; state (h, c).
class LSTMCell : public Module {
 public:
  LSTMCell(int64_t input_size, int64_t hidden_size, const Init& init, LSTMCellOptions options = {});

  LSTMState step(const Tensor& x, const LSTMState& state = {}) const;
  LSTMState forward(const Tensor& x, const LSTMState& state = {}) const { return step(x, state); }
  Tensor input_projection(const Tensor& x) const;  // [..., I] -> [..., 4H]
  LSTMState step_with_gates(const Tensor& gates_i, const LSTMState& state = {}) const;  // gates_i [B, 4H]
  std::string extra_repr() const override;

  int64_t input_size, hidden_size;
  LSTMCellOptions options;
  Parameter weight_ih, weight_hh, bias_ih, bias_hh;  // [4H, I], [4H, H], [4H], [4H]
};

// ---- layers: sequences, batch first ----

// The parameters and checks RNN, GRU and LSTM share.
class RecurrentBase : public Module {
 public:
  int64_t input_size, hidden_size, num_layers;
  bool bias;
  // Per layer k, registered as weight_ih_l{k}, weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k}.
  std::vector<Parameter> weight_ih, weight_hh, bias_ih, bias_hh;

 protected:
  RecurrentBase(const char* kind, int64_t gates, int64_t input_size, int64_t hidden_size, int64_t num_layers,
                bool bias, const Init& init);
  std::string base_repr() const;
  // Checks x, one [L, B, H] state tensor (when defined) and lengths; returns
  // lengths as a [T, B, 1] bool mask of valid steps (undefined without lengths).
  Tensor check_inputs(const Tensor& x, const Tensor& lengths) const;
  void check_state(const Tensor& x, const Tensor& s, const char* what) const;
  const char* kind_;
};

/// Stacked Elman RNN.
class RNN : public RecurrentBase {
 public:
  RNN(int64_t input_size, int64_t hidden_size, const Init& init, RNNOptions options = {});

  /// x [B, T, I], h0 [L, B, H] (undefined: zeros), lengths [B] integer
  /// (undefined: all T) -> (output [B, T, H], h [L, B, H]).
  RecurrentOutput forward(const Tensor& x, const Tensor& h0 = {}, const Tensor& lengths = {}) const;
  std::string extra_repr() const override;

  Nonlinearity nonlinearity;
};

/// Stacked GRU.
class GRU : public RecurrentBase {
 public:
  GRU(int64_t input_size, int64_t hidden_size, const Init& init, GRUOptions options = {});

  RecurrentOutput forward(const Tensor& x, const Tensor& h0 = {}, const Tensor& lengths = {}) const;
  std::string extra_repr() const override;
};

/// Stacked LSTM.
class LSTM : public RecurrentBase {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, const Init& init, LSTMOptions options = {});

  /// x [B, T, I], state (h0, c0) each [L, B, H] (undefined: zeros), lengths [B]
  /// -> (output [B, T, H], (h, c) each [L, B, H]).
  LSTMOutput forward(const Tensor& x, const LSTMState& state = {}, const Tensor& lengths = {}) const;
  std::string extra_repr() const override;

  std::optional<double> forget_bias;
};

}  // namespace kiln::nn
