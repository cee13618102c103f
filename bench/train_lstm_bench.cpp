// Training workload lstm (issue 8; bench/torch_train_lstm.py is PyTorch's
// side): nn::LSTM(64 -> 256), batch first, x [32, 64, 64] randn, a
// Linear(256 -> 1) head on every output, MSE against a randn target
// [32, 64, 1], Adam (lr 1e-3); one full step per call on a fixed batch.
#include "bench/bench.h"
#include "kiln/kiln.h"

namespace bench {

namespace {

void lstm_step_bench(const std::string& name) {
  using namespace kiln;
  constexpr int64_t B = 32, T = 64, I = 64, H = 256;
  MemoryProbe mem;
  Rngs rngs(0);
  nn::Init init(rngs);
  // forget_bias nullopt: PyTorch's initialisation (it has no forget-bias rule).
  nn::LSTM lstm(I, H, init, {.forget_bias = std::nullopt});
  nn::Linear head(H, 1, init);
  std::vector<nn::Parameter> params = lstm.parameters().params();
  for (const auto& p : head.parameters()) params.push_back(p);
  optim::Adam opt(params, {.lr = 1e-3});
  Generator gen(1);
  Tensor x = randn({B, T, I}, gen), y = randn({B, T, 1}, gen);
  // bench.h's convention, per step: forward (input projection, recurrent
  // GEMM, head), weight grads of all three, input grads of the recurrent
  // GEMM and of the head (x needs no grad, so the projection has none).
  const double BT = double(B * T);
  double flops = 2.0 * BT * (2 * I * 4 * H + 3 * H * 4 * H + 3 * H);
  run_workload(name, {.unit = "sequences/s", .items_per_step = double(B), .flops_per_step = flops}, mem, [&] {
    train::update(mse_loss(head.forward(lstm.forward(x).output), y), opt);
  });
}

}  // namespace

void train_lstm_benches(std::vector<Bench>& out) { out.push_back({"lstm", lstm_step_bench}); }

}  // namespace bench
