// nn::LSTM's two paths: lstm_sequence (no lengths, or every row full length)
// and the per-step path (some row cut short). Lengths that cut nothing give
// the same outputs, states and gradients as no lengths; a stacked LSTM on the
// fused path equals its layers run one at a time through cells.
#include <gtest/gtest.h>

#include "kiln/nn/recurrent.h"
#include "tests/nn/parity.h"

namespace kiln::nn {
namespace {
using namespace testing;

std::vector<Tensor> all_grads(const LSTM& m, const Tensor& x) {
  std::vector<Tensor> g{x.grad()};
  for (const auto& [name, p] : m.named_parameters()) g.push_back(p.grad());
  return g;
}

TEST(RecurrentLstmSequence, FullLengthsMatchNoLengths) {
  Rngs rngs(5);
  LSTM lstm(3, 5, rngs, {.num_layers = 2});
  Tensor x = leaf({4, 6, 3}, 21).detach().to(kF32).requires_grad_(true);
  Tensor len = Tensor::empty({4}, kI64);
  for (int64_t b = 0; b < 4; ++b) len.data<int64_t>()[b] = 6;
  std::vector<std::vector<Tensor>> res;
  for (bool with_len : {false, true}) {
    lstm.zero_grad();
    x.set_grad({});
    auto out = with_len ? lstm.forward(x, {}, len) : lstm.forward(x);
    (sum(out.output) + sum(out.state.h) + 2.0 * sum(out.state.c)).backward();
    std::vector<Tensor> r = all_grads(lstm, x);
    r.push_back(out.output.detach());
    r.push_back(out.state.h.detach());
    r.push_back(out.state.c.detach());
    res.push_back(r);
  }
  for (size_t i = 0; i < res[0].size(); ++i) EXPECT_TRUE(all_close(res[0][i], res[1][i], 1e-6, 1e-7)) << i;
}

// Two layers on the fused path against two LSTMCells stepped by hand.
TEST(RecurrentLstmSequence, StackEqualsCellLoops) {
  Rngs rngs(6);
  LSTM lstm(3, 7, rngs, {.num_layers = 2});
  Tensor x = leaf({2, 4, 3}, 22).detach().to(kF32);
  Tensor h0 = leaf({2, 2, 7}, 23).detach().to(kF32), c0 = leaf({2, 2, 7}, 24).detach().to(kF32);
  auto want = lstm.forward(x, {h0, c0});
  Tensor in = x;
  for (int64_t k = 0; k < 2; ++k) {
    LSTMCell cell(k == 0 ? 3 : 7, 7, rngs);
    const auto i = size_t(k);
    cell.load_state_dict(StateDict{{"weight_ih", lstm.weight_ih[i].value()}, {"weight_hh", lstm.weight_hh[i].value()},
                                   {"bias_ih", lstm.bias_ih[i].value()}, {"bias_hh", lstm.bias_hh[i].value()}});
    LSTMState s{h0.select(0, k), c0.select(0, k)};
    std::vector<Tensor> hs;
    for (const Tensor& x_t : unbind(in, 1)) {
      s = cell.step(x_t, s);
      hs.push_back(s.h);
    }
    in = stack(hs, 1);
    EXPECT_TRUE(all_close(s.h, want.state.h.select(0, k), 1e-5, 1e-6)) << k;
    EXPECT_TRUE(all_close(s.c, want.state.c.select(0, k), 1e-5, 1e-6)) << k;
  }
  EXPECT_TRUE(all_close(in, want.output, 1e-5, 1e-6));
}

}  // namespace
}  // namespace kiln::nn
