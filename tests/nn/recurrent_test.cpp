// RNN, GRU, LSTM and cells: parity with torch.nn (tests/goldens/nn_recurrent.json,
// including length-masked cases against a per-sequence torch reference),
// gradchecks in f64 w.r.t. inputs, states and parameters, streaming,
// truncated BPTT, initialisation, printing and error messages.
#include "kiln/nn/recurrent.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/nn/parity.h"

namespace kiln::nn {
namespace {
using namespace testing;

const auto kRelu = Nonlinearity::relu;
constexpr int64_t I = 3, H = 2;  // the golden cases' sizes

std::vector<Tensor> seq(const RecurrentOutput& r) { return {r.output, r.h}; }
std::vector<Tensor> seq(const LSTMOutput& r) { return {r.output, r.state.h, r.state.c}; }

TEST(RecurrentParity, RNN) {
  Rngs rngs(0);
  RNN a(I, H, rngs);
  expect_parity(a, parity_case("nn_recurrent", "rnn_tanh"), [&](const auto& in) { return seq(a.forward(in[0])); });
  RNN b(I, H, rngs, {.num_layers = 2, .nonlinearity = kRelu});
  expect_parity(b, parity_case("nn_recurrent", "rnn_relu_2layers_state"),
                [&](const auto& in) { return seq(b.forward(in[0], in[1])); });
}

TEST(RecurrentParity, GRU) {
  Rngs rngs(0);
  GRU a(I, H, rngs);
  expect_parity(a, parity_case("nn_recurrent", "gru"), [&](const auto& in) { return seq(a.forward(in[0])); });
  GRU b(I, H, rngs, {.num_layers = 2});
  expect_parity(b, parity_case("nn_recurrent", "gru_2layers_state"),
                [&](const auto& in) { return seq(b.forward(in[0], in[1])); });
}

TEST(RecurrentParity, LSTM) {
  Rngs rngs(0);
  LSTM a(I, H, rngs);
  expect_parity(a, parity_case("nn_recurrent", "lstm"), [&](const auto& in) { return seq(a.forward(in[0])); });
  LSTM b(I, H, rngs, {.num_layers = 2});
  expect_parity(b, parity_case("nn_recurrent", "lstm_2layers_state"),
                [&](const auto& in) { return seq(b.forward(in[0], {in[1], in[2]})); });
  LSTM c(I, H, rngs, {.bias = false});
  expect_parity(c, parity_case("nn_recurrent", "lstm_nobias"), [&](const auto& in) { return seq(c.forward(in[0])); });
}

// inputs: x, lengths, then the initial state if any.
TEST(RecurrentParity, Lengths) {
  Rngs rngs(0);
  RNN rnn(I, H, rngs);
  expect_parity(rnn, parity_case("nn_recurrent", "rnn_lengths"),
                [&](const auto& in) { return seq(rnn.forward(in[0], {}, in[1])); });
  GRU gru(I, H, rngs);
  expect_parity(gru, parity_case("nn_recurrent", "gru_lengths_state"),
                [&](const auto& in) { return seq(gru.forward(in[0], in[2], in[1])); });
  LSTM lstm2(I, H, rngs, {.num_layers = 2});
  expect_parity(lstm2, parity_case("nn_recurrent", "lstm_2layers_lengths_state"),
                [&](const auto& in) { return seq(lstm2.forward(in[0], {in[2], in[3]}, in[1])); });
  LSTM lstm(I, H, rngs);
  expect_parity(lstm, parity_case("nn_recurrent", "lstm_lengths"),
                [&](const auto& in) { return seq(lstm.forward(in[0], {}, in[1])); });
}

// Two steps: x0 from the given state, then x1.
TEST(RecurrentParity, Cells) {
  Rngs rngs(0);
  RNNCell rc(I, H, rngs, {.nonlinearity = kRelu});
  expect_parity(rc, parity_case("nn_recurrent", "rnn_cell_relu"),
                [&](const auto& in) { return std::vector{rc.step(in[1], rc.step(in[0], in[2]))}; });
  // The same through input_projection + step_with_gates.
  expect_parity(rc, parity_case("nn_recurrent", "rnn_cell_relu"), [&](const auto& in) {
    return std::vector{rc.step_with_gates(rc.input_projection(in[1]), rc.step_with_gates(rc.input_projection(in[0]), in[2]))};
  });
  GRUCell gc(I, H, rngs);
  expect_parity(gc, parity_case("nn_recurrent", "gru_cell"),
                [&](const auto& in) { return std::vector{gc.forward(in[1], gc.forward(in[0], in[2]))}; });
  expect_parity(gc, parity_case("nn_recurrent", "gru_cell"), [&](const auto& in) {
    return std::vector{gc.step_with_gates(gc.input_projection(in[1]), gc.step_with_gates(gc.input_projection(in[0]), in[2]))};
  });
  LSTMCell lc(I, H, rngs);
  expect_parity(lc, parity_case("nn_recurrent", "lstm_cell"), [&](const auto& in) {
    auto [h, c] = lc.step(in[1], lc.step(in[0], {in[2], in[3]}));
    return std::vector{h, c};
  });
  expect_parity(lc, parity_case("nn_recurrent", "lstm_cell"), [&](const auto& in) {
    // Both timesteps projected at once ([2, B, I] -> [2, B, 4H]), as the layers do.
    Tensor gi = lc.input_projection(stack({in[0], in[1]}, 0));
    auto [h, c] = lc.step_with_gates(gi[1], lc.step_with_gates(gi[0], {in[2], in[3]}));
    return std::vector{h, c};
  });
}

// ---- gradchecks in f64 w.r.t. input, initial state and every parameter ----

Init f64_init(Rngs& rngs) {
  Init init(rngs);
  init.dtype = kF64;
  init.bias = init::uniform(-0.5, 0.5);
  return init;
}

template <class M>
std::vector<Tensor> with_params(std::vector<Tensor> in, const M& m) {
  for (const auto& [name, p] : m.named_parameters()) in.push_back(p.value());
  return in;
}

Tensor lengths_of(std::vector<int64_t> v) {
  Tensor t = Tensor::empty({int64_t(v.size())}, kI64);
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

TEST(RecurrentGrad, Layers) {
  Rngs rngs(1);
  Init init = f64_init(rngs);
  const int64_t B = 3, T = 3, In = 2, Hd = 3;
  Tensor x = leaf({B, T, In}, 1), h0 = leaf({2, B, Hd}, 2), c0 = leaf({2, B, Hd}, 3);
  for (auto nl : {Nonlinearity::tanh, kRelu}) {
    RNN rnn(In, Hd, init, {.num_layers = 2, .nonlinearity = nl});
    EXPECT_GRADCHECK(
        [&](const std::vector<Tensor>& in) { return seq(rnn.forward(in[0], in[1])); }, with_params({x, h0}, rnn));
  }
  GRU gru(In, Hd, init, {.num_layers = 2});
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return seq(gru.forward(in[0], in[1])); },
                   with_params({x, h0}, gru));
  LSTM lstm(In, Hd, init, {.num_layers = 2});
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return seq(lstm.forward(in[0], {in[1], in[2]})); },
                   with_params({x, h0, c0}, lstm));
  // Zero initial state, and a non-contiguous input.
  Tensor xn = noncontiguous(leaf({B, T, In}, 4)).requires_grad_(true);
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return seq(lstm.forward(in[0])); }, with_params({xn}, lstm));
}

TEST(RecurrentGrad, Lengths) {
  Rngs rngs(2);
  Init init = f64_init(rngs);
  const int64_t B = 4, T = 3, In = 2, Hd = 2;
  Tensor x = leaf({B, T, In}, 5), h0 = leaf({2, B, Hd}, 6), c0 = leaf({2, B, Hd}, 7);
  Tensor len = lengths_of({2, 0, 3, 1});
  RNN rnn(In, Hd, init, {.num_layers = 2});
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return seq(rnn.forward(in[0], in[1], len)); },
                   with_params({x, h0}, rnn));
  GRU gru(In, Hd, init, {.num_layers = 2});
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return seq(gru.forward(in[0], in[1], len)); },
                   with_params({x, h0}, gru));
  LSTM lstm(In, Hd, init, {.num_layers = 2});
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return seq(lstm.forward(in[0], {in[1], in[2]}, len)); },
                   with_params({x, h0, c0}, lstm));
}

TEST(RecurrentGrad, Cells) {
  Rngs rngs(3);
  Init init = f64_init(rngs);
  Tensor x = leaf({3, 2}, 8), h = leaf({3, 4}, 9), c = leaf({3, 4}, 10);
  RNNCell rc(2, 4, init);
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return rc.step(in[0], in[1]); }, with_params({x, h}, rc));
  GRUCell gc(2, 4, init);
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return gc.step(in[0], in[1]); }, with_params({x, h}, gc));
  LSTMCell lc(2, 4, init);
  EXPECT_GRADCHECK(
      [&](const std::vector<Tensor>& in) {
        auto [h2, c2] = lc.step(in[0], {in[1], in[2]});
        return std::vector{h2, c2};
      },
      with_params({x, h, c}, lc));
}

// ---- semantics ----

TEST(Recurrent, LengthsFreezeCarryAndZeroOutputs) {
  Rngs rngs(4);
  LSTM lstm(3, 4, rngs, {.num_layers = 2});
  Tensor x = leaf({3, 5, 3}, 11).detach().to(kF32);
  Tensor h0 = leaf({2, 3, 4}, 12).detach().to(kF32), c0 = leaf({2, 3, 4}, 13).detach().to(kF32);
  auto [y, s] = lstm.forward(x, {h0, c0}, lengths_of({5, 0, 2}));
  // Row 0 (full length) equals running it alone without lengths.
  auto full = lstm.forward(x.narrow(0, 0, 1), {h0.narrow(1, 0, 1), c0.narrow(1, 0, 1)});
  EXPECT_TRUE(all_close(y.narrow(0, 0, 1), full.output, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(s.h.narrow(1, 0, 1), full.state.h, 1e-5, 1e-6));
  // Row 1 (length 0): zero outputs, initial carry.
  EXPECT_TRUE(equal(y.select(0, 1), zeros({5, 4})));
  EXPECT_TRUE(equal(s.h.select(1, 1), h0.select(1, 1).contiguous()));
  EXPECT_TRUE(equal(s.c.select(1, 1), c0.select(1, 1).contiguous()));
  // Row 2 (length 2): the state after 2 steps, zeros after.
  auto two = lstm.forward(x.narrow(0, 2, 1).narrow(1, 0, 2), {h0.narrow(1, 2, 1), c0.narrow(1, 2, 1)});
  EXPECT_TRUE(all_close(y.narrow(0, 2, 1).narrow(1, 0, 2), two.output, 1e-5, 1e-6));
  EXPECT_TRUE(equal(y.select(0, 2).narrow(0, 2, 3), zeros({3, 4})));
  EXPECT_TRUE(all_close(s.c.narrow(1, 2, 1), two.state.c, 1e-5, 1e-6));
  // lengths == T everywhere is the unmasked result; i32 lengths work too.
  Tensor all = Tensor::empty({3}, kI32);
  for (int i = 0; i < 3; ++i) all.data<int32_t>()[i] = 5;
  auto a = lstm.forward(x, {h0, c0}, all);
  auto b = lstm.forward(x, {h0, c0});
  EXPECT_TRUE(equal(a.output, b.output));
  EXPECT_TRUE(equal(a.state.h, b.state.h));
}

// One call over T == two calls over T/2 passing the state along.
TEST(Recurrent, StreamingContinuesTheSequence) {
  Rngs rngs(5);
  Tensor x = leaf({2, 6, 3}, 14).detach().to(kF32);
  Tensor x1 = x.narrow(1, 0, 3), x2 = x.narrow(1, 3, 3);
  LSTM lstm(3, 4, rngs, {.num_layers = 2});
  auto whole = lstm.forward(x);
  auto p1 = lstm.forward(x1);
  auto p2 = lstm.forward(x2, p1.state);
  EXPECT_TRUE(all_close(cat({p1.output, p2.output}, 1), whole.output, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(p2.state.h, whole.state.h, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(p2.state.c, whole.state.c, 1e-5, 1e-6));
  GRU gru(3, 4, rngs, {.num_layers = 2});
  auto gw = gru.forward(x);
  auto g1 = gru.forward(x1);
  auto g2 = gru.forward(x2, g1.h);
  EXPECT_TRUE(all_close(cat({g1.output, g2.output}, 1), gw.output, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(g2.h, gw.h, 1e-5, 1e-6));
  RNN rnn(3, 4, rngs);
  auto rw = rnn.forward(x);
  auto r2 = rnn.forward(x2, rnn.forward(x1).h);
  EXPECT_TRUE(all_close(r2.h, rw.h, 1e-5, 1e-6));
}

// stop_gradient(state) between chunks: no gradient reaches the first chunk.
TEST(Recurrent, TruncatedBpttCutsTheGraph) {
  Rngs rngs(6);
  LSTM lstm(3, 4, rngs);
  Tensor x1 = leaf({2, 3, 3}, 15).detach().to(kF32).requires_grad_(true);
  Tensor x2 = leaf({2, 3, 3}, 16).detach().to(kF32).requires_grad_(true);
  auto p1 = lstm.forward(x1);
  auto p2 = lstm.forward(x2, stop_gradient(p1.state));
  sum(p2.output).backward();
  EXPECT_FALSE(x1.grad().defined());
  ASSERT_TRUE(x2.grad().defined());
  // Without the cut the gradient does cross.
  auto q2 = lstm.forward(x2, lstm.forward(x1).state);
  sum(q2.output).backward();
  ASSERT_TRUE(x1.grad().defined());
  EXPECT_GT(sum(abs(x1.grad())).item<float>(), 0.0f);
  GRU gru(3, 4, rngs);
  Tensor y1 = leaf({2, 3, 3}, 17).detach().to(kF32).requires_grad_(true);
  auto g1 = gru.forward(y1);
  sum(gru.forward(x2, kiln::stop_gradient(g1.h)).output).backward();
  EXPECT_FALSE(y1.grad().defined());
}

// A cell stepped over unbind(x, 1) (strided [B, I] views) equals the layer
// with the same weights, for step and for step_with_gates on a projection
// of the whole sequence.
TEST(Recurrent, CellLoopEqualsLayer) {
  Rngs rngs(11);
  LSTM lstm(3, 4, rngs);
  LSTMCell cell(3, 4, rngs);
  cell.load_state_dict(StateDict{{"weight_ih", lstm.weight_ih[0].value()}, {"weight_hh", lstm.weight_hh[0].value()},
                                 {"bias_ih", lstm.bias_ih[0].value()}, {"bias_hh", lstm.bias_hh[0].value()}});
  Tensor x = leaf({2, 5, 3}, 19).detach().to(kF32);
  auto want = lstm.forward(x);
  LSTMState s, s2;
  std::vector<Tensor> hs;
  Tensor gi = cell.input_projection(x);  // [2, 5, 16]
  int64_t t = 0;
  for (const Tensor& x_t : unbind(x, 1)) {
    s = cell.step(x_t, s);
    s2 = cell.step_with_gates(gi.select(1, t++), s2);
    hs.push_back(s.h);
  }
  EXPECT_TRUE(all_close(stack(hs, 1), want.output, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(s.c, want.state.c.select(0, 0), 1e-5, 1e-6));
  EXPECT_TRUE(all_close(s2.h, want.state.h.select(0, 0), 1e-5, 1e-6));
}

// bf16 parameters and input: the same layer's f32 result within bf16 rounding.
TEST(Recurrent, Bf16FollowsF32) {
  Rngs rngs(10);
  LSTM lstm(3, 8, rngs);
  GRU gru(3, 8, rngs);
  Tensor x = leaf({2, 4, 3}, 18).detach().to(kF32);
  auto want = lstm.forward(x);
  auto gwant = gru.forward(x);
  lstm.to(kBF16);
  gru.to(kBF16);
  auto got = lstm.forward(x.to(kBF16), {}, lengths_of({4, 2}));
  EXPECT_EQ(got.output.dtype(), kBF16);
  EXPECT_TRUE(all_close(got.output.to(kF32).select(0, 0), want.output.select(0, 0), 3e-2, 3e-2));
  EXPECT_TRUE(all_close(gru.forward(x.to(kBF16)).h.to(kF32), gwant.h, 3e-2, 3e-2));
}

// ---- construction ----

TEST(Recurrent, ParameterNamesShapesAndInit) {
  Rngs rngs(7);
  LSTM lstm(5, 8, rngs, {.num_layers = 2});
  std::vector<std::string> names;
  for (const auto& [n, p] : lstm.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
                                             "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1"}));
  EXPECT_EQ(lstm.weight_ih[0].shape(), (Shape{32, 5}));
  EXPECT_EQ(lstm.weight_ih[1].shape(), (Shape{32, 8}));
  EXPECT_EQ(lstm.weight_hh[1].shape(), (Shape{32, 8}));
  EXPECT_EQ(lstm.bias_hh[1].shape(), (Shape{32}));
  // Weights U(-1/sqrt(H), 1/sqrt(H)) whatever the input size; they spread over the range.
  const float bound = 1.0f / std::sqrt(8.0f);
  for (const Parameter& w : {lstm.weight_ih[0], lstm.weight_hh[0], lstm.weight_ih[1]}) {
    EXPECT_LE(max(abs(w.value())).item<float>(), bound);
    EXPECT_GT(max(abs(w.value())).item<float>(), 0.8f * bound);
  }
  // Forget-gate bias one in bias_ih (slice [H, 2H)), everything else zero.
  Tensor b = lstm.bias_ih[1].value();
  EXPECT_TRUE(equal(b.narrow(0, 8, 8), ones({8})));
  EXPECT_TRUE(equal(b.narrow(0, 0, 8), zeros({8})));
  EXPECT_TRUE(equal(b.narrow(0, 16, 16), zeros({16})));
  EXPECT_TRUE(equal(lstm.bias_hh[0].value(), zeros({32})));
  EXPECT_FALSE(lstm.bias_ih[0].decay());
  EXPECT_TRUE(lstm.weight_hh[0].decay());
  // PyTorch's behaviour on request.
  LSTM torchlike(5, 8, rngs, {.forget_bias = 0.0});
  EXPECT_TRUE(equal(torchlike.bias_ih[0].value(), zeros({32})));
  Init torch_init(rngs);
  torch_init.bias = init::fan_in_uniform();
  LSTM drawn(5, 8, torch_init, {.forget_bias = std::nullopt});  // every bias U(-1/sqrt(H), 1/sqrt(H))
  EXPECT_LE(max(abs(drawn.bias_ih[0].value())).item<float>(), bound);
  EXPECT_GT(max(abs(drawn.bias_ih[0].value().narrow(0, 8, 8))).item<float>(), 0.0f);
  EXPECT_LT(max(abs(drawn.bias_ih[0].value().narrow(0, 8, 8))).item<float>(), 1.0f);
  LSTMCell cell(5, 8, rngs);
  EXPECT_TRUE(equal(cell.bias_ih.value().narrow(0, 8, 8), ones({8})));
  GRU gru(5, 8, rngs, {.bias = false});
  EXPECT_EQ(gru.named_parameters().size(), 2u);
  EXPECT_EQ(gru.weight_ih[0].shape(), (Shape{24, 5}));
  RNNCell rc(5, 8, rngs);
  EXPECT_EQ(rc.weight_hh.shape(), (Shape{8, 8}));
}

TEST(Recurrent, Repr) {
  Rngs rngs(8);
  EXPECT_EQ(LSTM(10, 20, rngs).repr(), "LSTM(10, 20)");
  EXPECT_EQ(GRU(10, 20, rngs, {.num_layers = 2, .bias = false}).repr(), "GRU(10, 20, num_layers=2, bias=false)");
  EXPECT_EQ(RNN(10, 20, rngs, {.nonlinearity = kRelu}).repr(), "RNN(10, 20, nonlinearity=relu)");
  EXPECT_EQ(RNNCell(10, 20, rngs, {.nonlinearity = kRelu}).repr(), "RNNCell(10, 20, nonlinearity=relu)");
  EXPECT_EQ(LSTMCell(10, 20, rngs).repr(), "LSTMCell(10, 20)");
  EXPECT_EQ(GRUCell(10, 20, rngs, {.bias = false}).repr(), "GRUCell(10, 20, bias=false)");
}

TEST(Recurrent, Errors) {
  Rngs rngs(9);
  LSTM lstm(3, 4, rngs, {.num_layers = 2});
  Tensor x = zeros({2, 5, 3});
  EXPECT_KILN_ERROR(lstm.forward(zeros({2, 3})), "[LSTM] input [2, 3] must be [B, T, I] (batch first)");
  EXPECT_KILN_ERROR(lstm.forward(zeros({2, 5, 4})), "[LSTM] input [2, 5, 4] has 4 features, expected 3 (input_size)");
  EXPECT_KILN_ERROR(lstm.forward(zeros({2, 5, 3}, {.dtype = kF64})),
                    "[LSTM] input dtype f64 does not match the parameters' f32");
  EXPECT_KILN_ERROR(lstm.forward(zeros({2, 0, 3})), "[LSTM] input [2, 0, 3] has no timesteps");
  EXPECT_KILN_ERROR(lstm.forward(x, {zeros({1, 2, 4}), {}}),
                    "[LSTM] h0 [1, 2, 4] must be [num_layers, B, H] = [2, 2, 4] for input [2, 5, 3]");
  EXPECT_KILN_ERROR(lstm.forward(x, {zeros({2, 2, 4}), zeros({2, 2, 4}, {.dtype = kF64})}),
                    "[LSTM] c0 dtype f64 does not match the input's f32");
  EXPECT_KILN_ERROR(lstm.forward(x, {}, lengths_of({5, 6})), "[LSTM] lengths[1] = 6 is outside [0, T] = [0, 5]");
  EXPECT_KILN_ERROR(lstm.forward(x, {}, lengths_of({-1, 2})), "[LSTM] lengths[0] = -1 is outside [0, T] = [0, 5]");
  EXPECT_KILN_ERROR(lstm.forward(x, {}, lengths_of({1, 2, 3})), "[LSTM] lengths [3] must be [B] = [2] for input");
  EXPECT_KILN_ERROR(lstm.forward(x, {}, zeros({2})), "[LSTM] lengths must be an integer tensor (i64, i32, u8), got f32");
  GRU gru(3, 4, rngs);
  EXPECT_KILN_ERROR(gru.forward(x, zeros({1, 3, 4})), "[GRU] h0 [1, 3, 4] must be [num_layers, B, H] = [1, 2, 4]");
  RNN rnn(3, 4, rngs);
  EXPECT_KILN_ERROR(rnn.forward(zeros({2, 5, 2})), "[RNN] input [2, 5, 2] has 2 features, expected 3");
  EXPECT_KILN_ERROR(LSTM(3, 0, rngs), "[LSTM] input_size 3 and hidden_size 0 must be positive");
  EXPECT_KILN_ERROR(GRU(3, 4, rngs, {.num_layers = 0}), "[GRU] num_layers must be at least 1, got 0");
  LSTMCell cell(3, 4, rngs);
  EXPECT_KILN_ERROR(cell.step(zeros({2, 5})), "[LSTMCell] input [2, 5] must be [B, 3] (input_size 3)");
  EXPECT_KILN_ERROR(cell.step(zeros({2, 3}), {zeros({3, 4}), {}}), "[LSTMCell] h [3, 4] must be [B, H] = [2, 4]");
  EXPECT_KILN_ERROR(cell.step_with_gates(zeros({2, 12})), "[LSTMCell] gates_i [2, 12] must be [B, 16]");
  GRUCell gc(3, 4, rngs);
  EXPECT_KILN_ERROR(gc.step(zeros({2, 3}), zeros({2, 5})), "[GRUCell] h [2, 5] must be [B, H] = [2, 4]");
  RNNCell rc(3, 4, rngs);
  EXPECT_KILN_ERROR(rc.step(zeros({2, 3}, {.dtype = kF64})), "[RNNCell] input dtype f64 does not match the parameters' f32");
  EXPECT_KILN_ERROR(LSTM(3, 4, rngs, {.forget_bias = NAN}), "[LSTM] forget_bias must be finite, got nan");
  EXPECT_KILN_ERROR(RNNCell(0, 4, rngs), "[RNNCell] input_size 0 and hidden_size 4 must be positive");
}

}  // namespace
}  // namespace kiln::nn
