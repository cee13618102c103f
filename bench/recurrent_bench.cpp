// Benches for the recurrent layers (bench/run): forward + backward per
// iteration in f32, the same shapes as bench/torch_recurrent.py.
//   lstm_b32t64i64h128   nn::LSTM(64, 128), x [32, 64, 64], zero state, output.backward(g)
//   gru_b32t64i64h128    nn::GRU(64, 128), same shapes
#include "bench/bench.h"
#include "kiln/kiln.h"

namespace bench {

namespace {

template <class Layer>
void bench_layer(const std::string& name) {
  kiln::Rngs rngs(0);
  Layer layer(64, 128, rngs);
  kiln::Generator gen(1);
  kiln::Tensor x = kiln::randn({32, 64, 64}, gen).requires_grad_(), g = kiln::randn({32, 64, 128}, gen);
  double sec = seconds_per_call(
      [&] {
        layer.forward(x).output.backward(g);
        layer.zero_grad();
        x.set_grad({});
      },
      0.3);
  emit(name, "time", "us/iter", sec * 1e6);
}

}  // namespace

void recurrent_benches(std::vector<Bench>& out) {
  out.push_back({"lstm_b32t64i64h128", bench_layer<kiln::nn::LSTM>});
  out.push_back({"gru_b32t64i64h128", bench_layer<kiln::nn::GRU>});
}

}  // namespace bench
