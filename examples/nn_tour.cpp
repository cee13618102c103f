// A tour of kiln::nn: a small CNN and an LSTM, each trained for a few steps on
// synthetic data with optim::SGD, then saved and loaded back.
//
//   build/examples/nn_tour
#include <kiln/kiln.h>

#include <cstdio>
#include <filesystem>

using namespace kiln;

// [B, 1, 12, 12] images -> 4 classes: which quadrant holds the bright blob.
struct SmallCnn : nn::Module {
  nn::Shared<nn::Sequential> features;
  nn::Shared<nn::Linear> head;

  explicit SmallCnn(const nn::Init& init)
      : features(register_module("features", nn::Sequential(nn::Conv2d(1, 8, 3, init, {.padding = 1}),
                                                            nn::BatchNorm2d(8), nn::ReLU(), nn::MaxPool2d(2),
                                                            nn::Conv2d(8, 16, 3, init, {.padding = 1}), nn::ReLU(),
                                                            nn::AdaptiveAvgPool2d(2), nn::Flatten()))),
        head(register_module("head", nn::Linear(16 * 2 * 2, 4, init))) {}

  Tensor forward(const Tensor& x) const { return head(features(x)); }
};

// [B, T, 1] sequences -> [B] the sign of their sum, from the LSTM's last state.
struct SignOfSum : nn::Module {
  nn::Shared<nn::LSTM> lstm;
  nn::Shared<nn::Linear> head;

  explicit SignOfSum(const nn::Init& init)
      : lstm(register_module("lstm", nn::LSTM(1, 16, init, {.num_layers = 2}))),
        head(register_module("head", nn::Linear(16, 2, init))) {}

  Tensor forward(const Tensor& x) const {
    auto [seq, state] = lstm(x);                   // seq [B, T, 16], state.h [2, B, 16]
    return head(state.h.select(0, 1));             // the top layer's last h
  }
};

std::pair<Tensor, Tensor> quadrant_batch(Generator& gen, int64_t batch) {
  Tensor y = randint(0, 4, {batch}, gen);
  Tensor x = mul(randn({batch, 1, 12, 12}, gen), 0.3);
  auto labels = y.to_vector<int64_t>();
  float* px = x.data<float>();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 6; ++j) px[b * 144 + (i + 6 * (labels[b] / 2)) * 12 + j + 6 * (labels[b] % 2)] += 1.0f;
  return {x, y};
}

std::pair<Tensor, Tensor> sign_batch(Generator& gen, int64_t batch) {
  Tensor x = randn({batch, 10, 1}, gen);
  Tensor y = gt(sum(x, {1, 2}), 0.0).to(kI64);
  return {x, y};
}

// Gradient descent through value_and_grad and an optimizer (docs/optim.md).
template <class M, class Batch>
void train_steps(const char* name, M& model, Batch next_batch, int steps, double lr) {
  model.train();
  optim::SGD opt(model.parameters(), {.lr = lr});
  for (int step = 1; step <= steps; ++step) {
    auto [x, y] = next_batch();
    auto [loss, grads] = value_and_grad(model, [&](M& m) { return cross_entropy(m.forward(x), y); });
    opt.step(grads);
    if (step == 1 || step % 50 == 0) std::printf("%s step %3d  loss %.4f\n", name, step, loss.template item<float>());
  }
}

template <class M, class Batch>
double accuracy(M& model, Batch next_batch) {
  NoGradGuard no_grad;
  model.eval();
  auto [x, y] = next_batch();
  Tensor correct = eq(argmax(model.forward(x), -1), y);
  return sum(correct.to(kF32)).item<float>() / double(y.numel());
}

int main() {
  Rngs rngs(0);
  Generator data(1);

  SmallCnn cnn(rngs);
  std::printf("%s\nparameters: %lld\n\n", cnn.repr().c_str(), static_cast<long long>(cnn.num_parameters()));
  train_steps("cnn ", cnn, [&] { return quadrant_batch(data, 32); }, 100, 0.1);
  std::printf("cnn  accuracy on a fresh batch: %.3f\n\n", accuracy(cnn, [&] { return quadrant_batch(data, 256); }));

  SignOfSum rnn(rngs);
  std::printf("%s\nparameters: %lld\n\n", rnn.repr().c_str(), static_cast<long long>(rnn.num_parameters()));
  train_steps("lstm", rnn, [&] { return sign_batch(data, 32); }, 300, 0.5);
  std::printf("lstm accuracy on a fresh batch: %.3f\n\n", accuracy(rnn, [&] { return sign_batch(data, 256); }));

  // Weights (and BatchNorm's running statistics) round-trip through a file.
  const std::string path = (std::filesystem::temp_directory_path() / "kiln_nn_tour.safetensors").string();
  io::save_safetensors(path, cnn.state_dict());
  Rngs other(42);
  SmallCnn copy(other);
  copy.load_state_dict(io::load_safetensors(path));
  auto [x, y] = quadrant_batch(data, 8);
  cnn.eval();
  copy.eval();
  std::printf("reloaded CNN gives the same logits: %s\n",
              allclose(cnn.forward(x), copy.forward(x)) ? "yes" : "NO");
  std::filesystem::remove(path);
}
